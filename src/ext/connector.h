/*
 * connector.h - the Connector type's insides, shared by connector.c (the type,
 * the asynchronous surface, close), blocking.c (blocking calls) and operator.c
 * (the operator's calls).
 */
#ifndef LMCA_EXT_CONNECTOR_H
#define LMCA_EXT_CONNECTOR_H

#include <pthread.h>
#include <stdbool.h>

#include "ext.h"
#include "logsink.h"

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

/* Applies keyword settings (LMCache's extra_config names, plus num_workers) to
   `cfg`; `keep` (a list) holds the strings cfg points into. -1 with ConfigError
   naming the key. */
int ext_apply_settings(ext_state *st, PyObject *kwargs, lmca_config_t *cfg, unsigned *workers,
                       PyObject *keep);

/* The UTF-8 of key `obj` (index `i` for messages, -1 for a single key), or NULL
   with InvalidArgumentError set. */
const char *ext_key_text(ext_state *st, PyObject *obj, Py_ssize_t i);

/* A list or tuple of keys (not a str, which is a sequence of characters): a new
   reference to PySequence_Fast of it, or NULL with an error set. */
PyObject *ext_key_list(ext_state *st, PyObject *keys);

/* Sets dict[name] to `value`, a new reference it consumes (NULL: an error is
   set). 0, or -1 with an error set. */
int ext_dict_take(PyObject *dict, const char *name, PyObject *value);

/* A meta record's fields as stat() reports them, without md and ttl: ver,
   nseg, seg_b, tot_b, wid, serde, ttl_class, pin, created_at, crc32 (None when
   not stored). New reference, or NULL with an error set. */
PyObject *ext_meta_dict(const lmca_meta_t *m);

/* The md blob as bytes (b"" when none). New reference. */
PyObject *ext_md_bytes(const lmca_meta_t *m);

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
PyObject *ext_plan(Connector *self, PyObject *nbytes);
PyObject *ext_stats(Connector *self, PyObject *ignored);
PyObject *ext_eviction(Connector *self, PyObject *ignored);
PyObject *ext_list_keys(Connector *self, PyObject *args, PyObject *kwargs);

/* operator.c: the operator's calls (the CLI's probe, stats, ls, inspect,
   repair), listed in connector.c's table. */
PyObject *ext_info(Connector *self, PyObject *command);
PyObject *ext_cluster_size(Connector *self, PyObject *ignored);
PyObject *ext_scan(Connector *self, PyObject *args, PyObject *kwargs);
PyObject *ext_sweep(Connector *self, PyObject *ignored);
PyObject *ext_remove_record(Connector *self, PyObject *digest);
PyObject *ext_inspect(Connector *self, PyObject *key);

#endif /* LMCA_EXT_CONNECTOR_H */
