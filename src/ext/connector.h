/*
 * connector.h - the Connector type's insides, shared by connector.c (the type,
 * the asynchronous surface, close), blocking.c (blocking calls) and logsink.c.
 */
#ifndef LMCA_EXT_CONNECTOR_H
#define LMCA_EXT_CONNECTOR_H

#include <pthread.h>
#include <stdbool.h>

#include "ext.h"

typedef struct ext_log_sink ext_log_sink;

typedef struct {
    PyObject_HEAD
    lmca_t *h;
    lmca_pool_t *pool;
    ext_log_sink *logs;  /* the handle's log callback target, freed after it */
    bool closed;
    /* Blocking calls running with the GIL released; close() waits on `idle`
       until there are none, without holding the GIL. */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int busy;
    PyObject *leftovers; /* completions taken at close, for one last drain */
} Connector;

ext_state *ext_state_of_connector(Connector *self);

/* Raises CanceledError and returns -1 once the connector is closed. */
int ext_check_open(Connector *self);

/*
 * A blocking call: ext_call_enter() checks that the connector is open (else
 * raises and returns false) and counts the call, so close() waits for it; then
 * the caller releases the GIL around the engine call alone; ext_call_leave()
 * uncounts it and flushes the engine's log lines. Nothing between enter and the
 * GIL release may run Python code (which could close the connector).
 */
bool ext_call_enter(Connector *self);
void ext_call_leave(Connector *self);

#define EXT_BLOCKING(self, ok, call)    \
    do {                                \
        (ok) = ext_call_enter(self);    \
        if (ok) {                       \
            Py_BEGIN_ALLOW_THREADS      \
            call;                       \
            Py_END_ALLOW_THREADS        \
            ext_call_leave(self);       \
        }                               \
    } while (0)

/* The UTF-8 of key `obj` (index `i` for messages, -1 for a single key), or NULL
   with InvalidArgumentError set. */
const char *ext_key_text(ext_state *st, PyObject *obj, Py_ssize_t i);

/* A list or tuple of keys (not a str, which is a sequence of characters): a new
   reference to PySequence_Fast of it, or NULL with an error set. */
PyObject *ext_key_list(ext_state *st, PyObject *keys);

/* logsink.c */
ext_log_sink *ext_log_sink_new(void);
void ext_log_sink_free(ext_log_sink *s);
void ext_log_sink_cb(void *udata, int level, const char *msg); /* an lmca_log_cb */
/* Sends queued lines to logging.getLogger("lmcache_aerospike"); GIL held. Keeps
   a pending exception as it was. */
void ext_log_sink_flush(ext_log_sink *s);

/* A pending exception, kept across code that may clear it. */
typedef struct {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc;
#else
    PyObject *type, *value, *tb;
#endif
} ext_saved_error;

static inline ext_saved_error
ext_error_save(void)
{
    ext_saved_error s;
#if PY_VERSION_HEX >= 0x030C0000
    s.exc = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&s.type, &s.value, &s.tb);
#endif
    return s;
}

static inline void
ext_error_restore(ext_saved_error s)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(s.exc);
#else
    PyErr_Restore(s.type, s.value, s.tb);
#endif
}

/* blocking.c: the methods, listed in connector.c's table. */
PyObject *ext_put(Connector *self, PyObject *args, PyObject *kwargs);
PyObject *ext_get(Connector *self, PyObject *args);
PyObject *ext_stat(Connector *self, PyObject *arg);
PyObject *ext_exists(Connector *self, PyObject *arg);
PyObject *ext_remove(Connector *self, PyObject *arg);
PyObject *ext_touch(Connector *self, PyObject *args, PyObject *kwargs);
PyObject *ext_prefix(Connector *self, PyObject *keys);
PyObject *ext_ping(Connector *self, PyObject *ignored);
PyObject *ext_limits(Connector *self, PyObject *ignored);
PyObject *ext_stats(Connector *self, PyObject *ignored);

#endif /* LMCA_EXT_CONNECTOR_H */
