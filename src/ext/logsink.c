/*
 * logsink.c - the engine's log lines, from any thread, to Python's `logging`.
 *
 * The engine calls its log callback on whatever thread runs the call: the
 * constructor's, a blocking call's (GIL released) or a worker's (never holding
 * the GIL). So the callback only queues the line under a mutex; the connector
 * flushes the queue into the "lmcache_aerospike" logger whenever it holds the
 * GIL anyway (after open, after each blocking call, on drain and close). The
 * sink lives as long as the handle that calls it: lmca_close() comes first.
 */
#include <pthread.h>

#include "logsink.h"

#define SINK_LINES 64
#define SINK_LINE_MAX 320

typedef struct {
    int level;
    char text[SINK_LINE_MAX];
} sink_line;

struct ext_log_sink {
    pthread_mutex_t lock;
    sink_line lines[2][SINK_LINES]; /* queued lines, and the flusher's copy */
    int n, current;
    unsigned long dropped;          /* lines lost to a full queue since a flush */
};

ext_log_sink *
ext_log_sink_new(void)
{
    ext_log_sink *s = PyMem_RawCalloc(1, sizeof *s);
    if (s != NULL)
        pthread_mutex_init(&s->lock, NULL);
    return s;
}

void
ext_log_sink_free(ext_log_sink *s)
{
    if (s == NULL)
        return;
    pthread_mutex_destroy(&s->lock);
    PyMem_RawFree(s);
}

void
ext_log_sink_cb(void *udata, int level, const char *msg)
{
    ext_log_sink *s = udata;
    pthread_mutex_lock(&s->lock);
    if (s->n < SINK_LINES) {
        sink_line *l = &s->lines[s->current][s->n++];
        l->level = level;
        snprintf(l->text, sizeof l->text, "%s", msg);
    } else {
        s->dropped++; /* a flood of corrupt records must not grow memory */
    }
    pthread_mutex_unlock(&s->lock);
}

/* Logging is best effort: a handler's error never fails the call. A Ctrl-C
   that lands in a handler is not an error of it, though: *interrupted asks the
   caller to raise it again once the call's own state is back. */
static void
emit(PyObject *logger, int level, const char *text, bool *interrupted)
{
    PyObject *r = PyObject_CallMethod(logger, "log", "is", level, text);
    if (r == NULL && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
        *interrupted = true;
    Py_XDECREF(r);
    PyErr_Clear();
}

void
ext_log_sink_flush(ext_log_sink *s)
{
    sink_line *lines;
    unsigned long dropped;
    int n;

    if (s == NULL)
        return;
    /* Swap the queue out; the GIL makes this thread the only flusher. */
    pthread_mutex_lock(&s->lock);
    lines = s->lines[s->current];
    n = s->n;
    dropped = s->dropped;
    s->current ^= 1;
    s->n = 0;
    s->dropped = 0;
    pthread_mutex_unlock(&s->lock);
    if (n == 0 && dropped == 0)
        return;

    ext_saved_error saved = ext_error_save(); /* a call may be raising: keep it */
    bool interrupted = false;
    PyObject *logging = PyImport_ImportModule("logging"), *logger = NULL;
    if (logging)
        logger = PyObject_CallMethod(logging, "getLogger", "s", "lmcache_aerospike");
    PyErr_Clear();
    for (int i = 0; logger && i < n; i++)
        emit(logger, lines[i].level, lines[i].text, &interrupted);
    if (logger && dropped) {
        char text[96];
        snprintf(text, sizeof text, "%lu more engine log lines were dropped", dropped);
        emit(logger, LMCA_LOG_WARNING, text, &interrupted);
    }
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    ext_error_restore(saved);
    if (interrupted) /* delivered at the interpreter's next signal check */
        PyErr_SetInterrupt();
}
