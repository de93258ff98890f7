/*
 * connector.c - the Connector type: the asynchronous engine as LMCache's
 * NativeConnectorL2Adapter drives it (event_fd, submit_batch_*,
 * drain_completions, close), plus blocking single-key calls for the Python glue.
 *
 * Buffers: a submit takes every buffer with the buffer protocol and keeps the
 * Py_buffer views (so the objects stay alive and their memory pinned) until the
 * batch's completion is drained, or until close() has stopped the workers. The
 * GIL is released around every call that can wait on the network, and no worker
 * thread ever touches a Python object.
 */
#include "ext.h"

#include <structmember.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    lmca_t *h;
    lmca_pool_t *pool;
    bool closed;
    int busy;                /* blocking calls running with the GIL released */
    PyObject *leftovers;     /* completions taken at close, for one last drain */
} Connector;

/* The buffers one submission holds until its completion is drained. */
typedef struct {
    Py_ssize_t n;
    Py_buffer views[];
} inflight;

static ext_state *
state_of(Connector *self)
{
    return ext_state_of_type(Py_TYPE(self));
}

static int
check_open(Connector *self)
{
    if (self->closed) {
        ext_raise(state_of(self), LMCA_ECANCELED, 0, "the connector is closed");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Construction: keyword arguments are settings (LMCache's extra_config names).
 */

/* Engine log lines gathered while the GIL is released, sent to `logging` after. */
typedef struct {
    int levels[32];
    char lines[32][200];
    int n;
} log_buffer;

static void
gather_log(void *udata, int level, const char *msg)
{
    log_buffer *lb = udata;
    if (lb->n < 32) {
        lb->levels[lb->n] = level;
        snprintf(lb->lines[lb->n++], sizeof lb->lines[0], "%s", msg);
    }
}

static void
emit_log(const log_buffer *lb)
{
    PyObject *logging = PyImport_ImportModule("logging"), *logger = NULL;
    if (logging)
        logger = PyObject_CallMethod(logging, "getLogger", "s", "lmcache_aerospike");
    for (int i = 0; logger && i < lb->n; i++) {
        PyObject *r = PyObject_CallMethod(logger, "log", "is", lb->levels[i], lb->lines[i]);
        Py_XDECREF(r);
    }
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    PyErr_Clear(); /* logging is best effort; never fail a constructor for it */
}

/* A keyword value as the string lmca_config_set() parses. New reference. */
static PyObject *
setting_text(PyObject *value)
{
    if (PyBool_Check(value))
        return PyUnicode_FromString(value == Py_True ? "true" : "false");
    if (PyLong_Check(value))
        return PyObject_Str(value);
    if (PyUnicode_Check(value))
        return Py_NewRef(value);
    return NULL;
}

/* Applies the keywords to cfg; `keep` holds the strings cfg points into. */
static int
apply_settings(ext_state *st, PyObject *kwargs, lmca_config_t *cfg, unsigned *workers,
               PyObject *keep)
{
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    lmca_err_t err = {0};

    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        if (name == NULL)
            return -1;
        if (strcmp(name, "num_workers") == 0) {
            long n = PyLong_Check(value) ? PyLong_AsLong(value) : -1;
            if (n < 1 || n > 256) {
                ext_raise(st, LMCA_ECONFIG, 0, "config num_workers: expected an int, 1 to 256");
                return -1;
            }
            *workers = (unsigned)n;
            continue;
        }
        if (strcmp(name, "set_name") == 0) /* upstream LMCache's spelling */
            name = "set";
        PyObject *text = setting_text(value);
        if (text == NULL) {
            char msg[200];
            snprintf(msg, sizeof msg, "config %s: expected str, int or bool, got %s", name,
                     Py_TYPE(value)->tp_name);
            ext_raise(st, LMCA_ECONFIG, 0, msg);
            return -1;
        }
        int added = PyList_Append(keep, text);
        Py_DECREF(text); /* `keep` holds it now */
        if (added < 0)
            return -1;
        if (lmca_config_set(cfg, name, PyUnicode_AsUTF8(text), &err) != LMCA_OK) {
            ext_raise_err(st, &err);
            return -1;
        }
    }
    return 0;
}

static PyObject *
connector_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    ext_state *st = ext_state_of_type(type);
    lmca_config_t cfg;
    lmca_err_t err = {0};
    log_buffer lb = {.n = 0};
    unsigned workers = 8;
    lmca_t *h = NULL;
    lmca_pool_t *pool = NULL;
    int rc;

    if (PyTuple_GET_SIZE(args) > 0) {
        PyErr_SetString(PyExc_TypeError, "Connector() takes keyword arguments only");
        return NULL;
    }
    PyObject *keep = PyList_New(0);
    if (keep == NULL)
        return NULL;
    lmca_config_init(&cfg);
    cfg.log_cb = gather_log;
    cfg.log_udata = &lb;
    if (apply_settings(st, kwargs, &cfg, &workers, keep) < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = lmca_open(&cfg, &h, &err);
    if (rc == LMCA_OK && (rc = lmca_pool_open(h, workers, &pool, &err)) != LMCA_OK)
        lmca_close(h);
    Py_END_ALLOW_THREADS
    Py_DECREF(keep); /* lmca_open copied the strings */
    emit_log(&lb);
    if (rc != LMCA_OK)
        return ext_raise_err(st, &err);
    Connector *self = (Connector *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_BEGIN_ALLOW_THREADS
        lmca_pool_destroy(pool);
        lmca_close(h);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    self->h = h;
    self->pool = pool;
    return (PyObject *)self;
}

/* ---------------------------------------------------------------------------
 * Arguments.
 */

/* The UTF-8 of key `obj` (index `i` for messages, -1 for a single key). */
static const char *
key_text(ext_state *st, PyObject *obj, Py_ssize_t i)
{
    Py_ssize_t len;
    const char *s;
    char msg[160];

    if (!PyUnicode_Check(obj)) {
        snprintf(msg, sizeof msg, "key %zd: expected str, got %s", i, Py_TYPE(obj)->tp_name);
        ext_raise(st, LMCA_EINVAL, 0, msg);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(obj, &len)) == NULL)
        return NULL;
    if (len == 0 || len > LMCA_KEY_MAX || (Py_ssize_t)strlen(s) != len) {
        snprintf(msg, sizeof msg, "key %zd: must be 1 to %d bytes of UTF-8 without NUL", i,
                 LMCA_KEY_MAX);
        ext_raise(st, LMCA_EINVAL, 0, msg);
        return NULL;
    }
    return s;
}

static void
inflight_release(inflight *f)
{
    if (f == NULL)
        return;
    for (Py_ssize_t i = 0; i < f->n; i++)
        PyBuffer_Release(&f->views[i]);
    PyMem_Free(f);
}

/* Takes buffer views of every item of `bufs` (a sequence of n). */
static inflight *
take_buffers(ext_state *st, PyObject *bufs, Py_ssize_t n, bool writable)
{
    PyObject *seq = PySequence_Fast(bufs, "buffers must be a list or tuple");
    inflight *f;
    char msg[160];

    if (seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        snprintf(msg, sizeof msg, "%zd keys but %zd buffers", n, PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        ext_raise(st, LMCA_EINVAL, 0, msg);
        return NULL;
    }
    if ((f = PyMem_Malloc(sizeof *f + (size_t)n * sizeof(Py_buffer))) == NULL) {
        Py_DECREF(seq);
        return (inflight *)PyErr_NoMemory();
    }
    for (f->n = 0; f->n < n; f->n++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, f->n);
        int flags = writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
        if (PyObject_GetBuffer(item, &f->views[f->n], flags) < 0) {
            PyErr_Clear();
            snprintf(msg, sizeof msg, "buffer %zd: %s, %s buffer required", f->n,
                     Py_TYPE(item)->tp_name, writable ? "a writable C-contiguous" : "a C-contiguous");
            goto fail;
        }
        if (f->views[f->n].len == 0) {
            PyBuffer_Release(&f->views[f->n]);
            snprintf(msg, sizeof msg, "buffer %zd is empty", f->n);
            goto fail;
        }
    }
    Py_DECREF(seq);
    return f;
fail:
    Py_DECREF(seq);
    inflight_release(f);
    ext_raise(st, LMCA_EINVAL, 0, msg);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * The asynchronous surface (LMCache's native connector contract).
 */

static PyObject *
submit(Connector *self, lmca_op op, PyObject *keys, PyObject *bufs)
{
    ext_state *st = state_of(self);
    bool with_buffers = op == LMCA_OP_GET || op == LMCA_OP_SET;
    inflight *f = NULL;
    lmca_err_t err = {0};
    uint64_t id = 0;
    int rc = LMCA_EINVAL;

    if (check_open(self) < 0)
        return NULL;
    if (PyUnicode_Check(keys) || PyBytes_Check(keys)) /* a str is a sequence too */
        return ext_raise(st, LMCA_EINVAL, 0, "keys must be a list or tuple of str");
    PyObject *seq = PySequence_Fast(keys, "keys must be a list or tuple");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **ks = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    void **ptrs = PyMem_Malloc(sizeof(void *) * (size_t)(n ? n : 1));
    size_t *lens = PyMem_Malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (ks == NULL || ptrs == NULL || lens == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if ((ks[i] = key_text(st, PySequence_Fast_GET_ITEM(seq, i), i)) == NULL)
            goto out;
    if (with_buffers && (f = take_buffers(st, bufs, n, op == LMCA_OP_GET)) == NULL)
        goto out;
    for (Py_ssize_t i = 0; with_buffers && i < n; i++) {
        ptrs[i] = f->views[i].buf;
        lens[i] = (size_t)f->views[i].len;
    }
    lmca_batch_t b = {.op = op, .n = (size_t)n, .keys = ks,
                      .bufs = with_buffers ? ptrs : NULL, .lens = with_buffers ? lens : NULL,
                      .udata = f};
    /* Never waits for I/O: the pool copies the keys and queues the work. */
    rc = lmca_pool_submit(self->pool, &b, &id, &err);
    if (rc != LMCA_OK) {
        inflight_release(f);
        ext_raise_err(st, &err);
    }
out:
    PyMem_Free(ks);
    PyMem_Free(ptrs);
    PyMem_Free(lens);
    Py_DECREF(seq);
    return rc == LMCA_OK ? PyLong_FromUnsignedLongLong(id) : NULL;
}

static bool
two_args(const char *name, Py_ssize_t nargs)
{
    if (nargs == 2)
        return true;
    PyErr_Format(PyExc_TypeError, "%s() takes 2 positional arguments (keys, buffers), %zd given",
                 name, nargs);
    return false;
}

static PyObject *
submit_batch_get(Connector *self, PyObject *const *args, Py_ssize_t nargs)
{
    return two_args("submit_batch_get", nargs) ? submit(self, LMCA_OP_GET, args[0], args[1])
                                                : NULL;
}

static PyObject *
submit_batch_set(Connector *self, PyObject *const *args, Py_ssize_t nargs)
{
    return two_args("submit_batch_set", nargs) ? submit(self, LMCA_OP_SET, args[0], args[1])
                                                : NULL;
}

static PyObject *
submit_batch_exists(Connector *self, PyObject *keys)
{
    return submit(self, LMCA_OP_EXISTS, keys, NULL);
}

static PyObject *
submit_batch_prefix(Connector *self, PyObject *keys)
{
    return submit(self, LMCA_OP_PREFIX, keys, NULL);
}

static PyObject *
submit_batch_delete(Connector *self, PyObject *keys)
{
    return submit(self, LMCA_OP_DELETE, keys, NULL);
}

static PyObject *
event_fd(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (check_open(self) < 0)
        return NULL;
    return PyLong_FromLong(lmca_pool_fd(self->pool));
}

/* (future_id, ok, error, per-key results) for one completion. */
static PyObject *
completion_tuple(const lmca_completion_t *c)
{
    PyObject *results = PyList_New((Py_ssize_t)c->n);
    if (results == NULL)
        return NULL;
    for (size_t i = 0; i < c->n; i++)
        PyList_SET_ITEM(results, (Py_ssize_t)i, Py_NewRef(c->results[i] ? Py_True : Py_False));
    return Py_BuildValue("(KOsN)", (unsigned long long)c->id, c->status == LMCA_OK ? Py_True : Py_False,
                         c->status == LMCA_OK ? "" : c->error, results);
}

/* Turns drained completions into tuples (appended to `out`, if not NULL),
   releasing their buffers and freeing them whatever happens. */
static int
settle_completions(lmca_completion_t *c, PyObject *out)
{
    int rc = 0;
    while (c) {
        lmca_completion_t *next = c->next;
        if (out && rc == 0) {
            PyObject *t = completion_tuple(c);
            rc = t == NULL || PyList_Append(out, t) < 0 ? -1 : 0;
            Py_XDECREF(t);
        }
        inflight_release(c->udata);
        lmca_completion_free(c);
        c = next;
    }
    return rc;
}

static PyObject *
drain_completions(Connector *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out;
    if (self->closed) { /* what close() collected, once */
        out = self->leftovers ? self->leftovers : PyList_New(0);
        self->leftovers = NULL;
        return out;
    }
    if ((out = PyList_New(0)) == NULL)
        return NULL;
    if (settle_completions(lmca_pool_drain(self->pool), out) < 0)
        Py_CLEAR(out);
    return out;
}

/* Stops the workers (every accepted batch then completes, cancelled if it had
   not run), releases every buffer and keeps the completions for one more
   drain_completions(). */
static PyObject *
connector_close(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (self->closed)
        Py_RETURN_NONE;
    self->closed = true;
    while (self->busy > 0) { /* blocking calls still use the handle */
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
    Py_BEGIN_ALLOW_THREADS
    lmca_pool_shutdown(self->pool);
    Py_END_ALLOW_THREADS
    self->leftovers = PyList_New(0);
    int rc = settle_completions(lmca_pool_drain(self->pool), self->leftovers);
    Py_BEGIN_ALLOW_THREADS
    lmca_pool_destroy(self->pool);
    lmca_close(self->h);
    Py_END_ALLOW_THREADS
    self->pool = NULL;
    self->h = NULL;
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------
 * Blocking single-key calls for the Python glue.
 */

#define BLOCKING(self, call)          \
    do {                              \
        (self)->busy++;               \
        Py_BEGIN_ALLOW_THREADS        \
        call;                         \
        Py_END_ALLOW_THREADS          \
        (self)->busy--;               \
    } while (0)

static PyObject *
py_put(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "buffer", "md", "serde", "ttl_class", "pin", NULL};
    const char *key, *serde = NULL, *ttl_class = NULL;
    Py_buffer buf, md = {0};
    int pin = 0, rc;
    lmca_err_t err = {0};

    if (check_open(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kwargs, "sy*|$z*zzp", kwlist, &key, &buf, &md, &serde,
                                     &ttl_class, &pin))
        return NULL;
    lmca_put_opts_t o = {.md = md.buf, .md_len = md.buf ? (size_t)md.len : 0, .serde = serde,
                         .ttl_class = ttl_class, .pin = pin};
    BLOCKING(self, rc = lmca_put(self->h, key, buf.buf, (size_t)buf.len, &o, &err));
    PyBuffer_Release(&buf);
    if (md.obj)
        PyBuffer_Release(&md);
    if (rc != LMCA_OK)
        return ext_raise_err(state_of(self), &err);
    Py_RETURN_NONE;
}

static PyObject *
py_get(Connector *self, PyObject *args)
{
    const char *key;
    Py_buffer buf;
    size_t got = 0;
    int rc;
    lmca_err_t err = {0};

    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "sw*", &key, &buf))
        return NULL;
    BLOCKING(self, rc = lmca_get(self->h, key, buf.buf, (size_t)buf.len, &got, NULL, &err));
    PyBuffer_Release(&buf);
    if (rc == LMCA_MISS)
        Py_RETURN_NONE;
    if (rc != LMCA_OK)
        return ext_raise_err(state_of(self), &err);
    return PyLong_FromSize_t(got);
}

static PyObject *
meta_dict(const lmca_meta_t *m)
{
    return Py_BuildValue(
        "{s:I,s:I,s:K,s:K,s:y#,s:s,s:s,s:O,s:I,s:L,s:N}", "ver", m->ver, "nseg", m->nseg, "seg_b",
        (unsigned long long)m->seg_b, "tot_b", (unsigned long long)m->tot_b, "md",
        (const char *)m->md, (Py_ssize_t)m->md_len, "serde", m->serde, "ttl_class", m->ttl_class,
        "pin", m->pin ? Py_True : Py_False, "ttl", m->ttl, "created_at", (long long)m->created_at,
        "crc32", m->has_crc32 ? PyLong_FromUnsignedLong(m->crc32) : Py_NewRef(Py_None));
}

static PyObject *
py_stat(Connector *self, PyObject *arg)
{
    const char *key = key_text(state_of(self), arg, -1);
    lmca_meta_t *m;
    lmca_err_t err = {0};
    int rc;

    if (key == NULL || check_open(self) < 0)
        return NULL;
    if ((m = PyMem_Malloc(sizeof *m)) == NULL)
        return PyErr_NoMemory();
    BLOCKING(self, rc = lmca_stat(self->h, key, m, &err));
    PyObject *out = rc == LMCA_OK     ? meta_dict(m)
                    : rc == LMCA_MISS ? Py_NewRef(Py_None)
                                      : ext_raise_err(state_of(self), &err);
    PyMem_Free(m);
    return out;
}

/* exists / remove: True for OK, False for a miss. */
static PyObject *
key_call(Connector *self, PyObject *arg, int (*fn)(lmca_t *, const char *, lmca_err_t *))
{
    const char *key = key_text(state_of(self), arg, -1);
    lmca_err_t err = {0};
    int rc;
    if (key == NULL || check_open(self) < 0)
        return NULL;
    BLOCKING(self, rc = fn(self->h, key, &err));
    if (rc < 0)
        return ext_raise_err(state_of(self), &err);
    return PyBool_FromLong(rc == LMCA_OK);
}

static PyObject *
py_exists(Connector *self, PyObject *arg)
{
    return key_call(self, arg, lmca_exists);
}

static PyObject *
py_remove(Connector *self, PyObject *arg)
{
    return key_call(self, arg, lmca_remove);
}

static PyObject *
py_touch(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "pin", NULL};
    const char *key;
    int pin = 0, rc;
    lmca_err_t err = {0};
    if (check_open(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kwargs, "s|p", kwlist, &key, &pin))
        return NULL;
    BLOCKING(self, rc = lmca_touch(self->h, key, pin, &err));
    if (rc < 0)
        return ext_raise_err(state_of(self), &err);
    return PyBool_FromLong(rc == LMCA_OK);
}

static PyObject *
py_prefix(Connector *self, PyObject *keys)
{
    ext_state *st = state_of(self);
    PyObject *seq;
    size_t count = 0;
    lmca_err_t err = {0};
    int rc = LMCA_OK;

    if (check_open(self) < 0 || (seq = PySequence_Fast(keys, "keys must be a list")) == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **ks = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (ks == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n && rc == LMCA_OK; i++)
        if ((ks[i] = key_text(st, PySequence_Fast_GET_ITEM(seq, i), i)) == NULL)
            rc = LMCA_EINVAL;
    if (rc == LMCA_OK)
        BLOCKING(self, rc = lmca_prefix(self->h, ks, (size_t)n, &count, NULL, &err));
    PyMem_Free(ks);
    Py_DECREF(seq);
    if (rc != LMCA_OK)
        return PyErr_Occurred() ? NULL : ext_raise_err(st, &err);
    return PyLong_FromSize_t(count);
}

static PyObject *
py_ping(Connector *self, PyObject *Py_UNUSED(ignored))
{
    lmca_err_t err = {0};
    int rc;
    if (check_open(self) < 0)
        return NULL;
    BLOCKING(self, rc = lmca_ping(self->h, &err));
    if (rc != LMCA_OK)
        return ext_raise_err(state_of(self), &err);
    Py_RETURN_TRUE;
}

static PyObject *
py_limits(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (check_open(self) < 0)
        return NULL;
    const lmca_limits_t *l = lmca_limits(self->h);
    return Py_BuildValue("{s:K,s:s,s:K,s:K,s:K,s:K,s:K,s:K}", "server_cap",
                         (unsigned long long)l->server_cap, "cap_source", l->cap_source,
                         "block_bytes", (unsigned long long)l->block_bytes, "max_segment_bytes",
                         (unsigned long long)l->max_segment_bytes, "target_segment_bytes",
                         (unsigned long long)l->target_segment_bytes, "min_segment_bytes",
                         (unsigned long long)l->min_segment_bytes,
                         "single_record_threshold_bytes",
                         (unsigned long long)l->single_record_threshold_bytes,
                         "batch_threshold_bytes", (unsigned long long)l->batch_threshold_bytes);
}

static PyObject *
py_stats(Connector *self, PyObject *Py_UNUSED(ignored))
{
    lmca_pool_stats_t s;
    if (check_open(self) < 0)
        return NULL;
    lmca_pool_stats(self->pool, &s);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "submitted", (unsigned long long)s.submitted,
                         "completed", (unsigned long long)s.completed, "canceled",
                         (unsigned long long)s.canceled, "queued", (unsigned long long)s.queued,
                         "bytes_read", (unsigned long long)s.bytes_read, "bytes_written",
                         (unsigned long long)s.bytes_written);
}

/* ---------------------------------------------------------------------------
 * The type.
 */

static void
connector_dealloc(Connector *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (!self->closed) {
        PyObject *r = connector_close(self, NULL);
        if (r == NULL)
            PyErr_WriteUnraisable((PyObject *)self);
        Py_XDECREF(r);
    }
    Py_CLEAR(self->leftovers);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMethodDef connector_methods[] = {
    {"event_fd", (PyCFunction)event_fd, METH_NOARGS,
     "event_fd() -> int: readable when completions wait; drain_completions() clears it."},
    {"submit_batch_get", (PyCFunction)(void (*)(void))submit_batch_get, METH_FASTCALL,
     "submit_batch_get(keys, buffers) -> int: read each chunk into its writable buffer, whose "
     "size must be the chunk's."},
    {"submit_batch_set", (PyCFunction)(void (*)(void))submit_batch_set, METH_FASTCALL,
     "submit_batch_set(keys, buffers) -> int: store each buffer under its key."},
    {"submit_batch_exists", (PyCFunction)submit_batch_exists, METH_O,
     "submit_batch_exists(keys) -> int: per-key existence."},
    {"submit_batch_prefix", (PyCFunction)submit_batch_prefix, METH_O,
     "submit_batch_prefix(keys) -> int: per-key existence; the hit prefix is the leading Trues."},
    {"submit_batch_delete", (PyCFunction)submit_batch_delete, METH_O,
     "submit_batch_delete(keys) -> int: remove each key."},
    {"drain_completions", (PyCFunction)drain_completions, METH_NOARGS,
     "drain_completions() -> list[(future_id, ok, error, list[bool])]; releases their buffers "
     "and clears the event fd."},
    {"close", (PyCFunction)connector_close, METH_NOARGS,
     "close(): cancel queued work, join the workers, release every buffer. Idempotent."},
    {"put", (PyCFunction)(void (*)(void))py_put, METH_VARARGS | METH_KEYWORDS,
     "put(key, buffer, *, md=None, serde=None, ttl_class=None, pin=False): store, blocking."},
    {"get", (PyCFunction)py_get, METH_VARARGS,
     "get(key, buffer) -> int | None: read into buffer; bytes read, or None on a miss."},
    {"stat", (PyCFunction)py_stat, METH_O, "stat(key) -> dict | None: the meta record."},
    {"exists", (PyCFunction)py_exists, METH_O, "exists(key) -> bool"},
    {"remove", (PyCFunction)py_remove, METH_O, "remove(key) -> bool: False if nothing was there."},
    {"touch", (PyCFunction)(void (*)(void))py_touch, METH_VARARGS | METH_KEYWORDS,
     "touch(key, pin=False) -> bool: refresh the TTL (pin: never expire)."},
    {"prefix", (PyCFunction)py_prefix, METH_O, "prefix(keys) -> int: leading hits, blocking."},
    {"ping", (PyCFunction)py_ping, METH_NOARGS, "ping() -> True, or raises ConnectionError."},
    {"limits", (PyCFunction)py_limits, METH_NOARGS, "limits() -> dict: the sizes in force."},
    {"stats", (PyCFunction)py_stats, METH_NOARGS, "stats() -> dict: counters since open."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
connector_closed(Connector *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->closed);
}

static PyGetSetDef connector_getset[] = {
    {"closed", (getter)connector_closed, NULL, "True after close().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot connector_slots[] = {
    {Py_tp_new, connector_new},
    {Py_tp_dealloc, connector_dealloc},
    {Py_tp_methods, connector_methods},
    {Py_tp_getset, connector_getset},
    {Py_tp_doc, "Connector(**settings): an Aerospike KV-chunk store for LMCache.\n\n"
                "Keywords are the extra_config settings (hosts, namespace, set, "
                "target_segment_bytes, default_ttl_seconds, ...) plus num_workers (default 8)."},
    {0, NULL},
};

PyType_Spec ext_connector_spec = {
    .name = "lmcache_aerospike._native.Connector",
    .basicsize = sizeof(Connector),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = connector_slots,
};
