/*
 * logsink.h - the engine's log lines, from any thread, to Python's `logging`
 * (logsink.c), and keeping a pending exception across the Python calls that
 * logging makes.
 */
#ifndef LMCA_EXT_LOGSINK_H
#define LMCA_EXT_LOGSINK_H

#include "ext.h"

typedef struct ext_log_sink ext_log_sink;

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

#endif /* LMCA_EXT_LOGSINK_H */
