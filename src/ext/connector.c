/*
 * connector.c - the Connector type: the asynchronous engine as LMCache's
 * NativeConnectorL2Adapter drives it (event_fd, submit_batch_*,
 * drain_completions, close). The blocking calls are in blocking.c.
 *
 * Buffers: a submit takes every buffer (and md blob) with the buffer protocol
 * and keeps the Py_buffer views (so the objects stay alive and their memory
 * pinned) until the batch's completion is drained, or until close() has stopped
 * the workers. The GIL is released around every call that can wait on the
 * network, and no worker thread ever touches a Python object.
 */
#include "connector.h"
#include "pending.h"

#include <unistd.h>

/* What one submission holds until its completion is drained: the views of its
   buffers and md blobs, and the tag strings its options point into. */
typedef struct {
    Py_ssize_t n;
    PyObject *tags;         /* (serde, ttl_class), or NULL */
    lmca_put_opts_t *opts;  /* SET with options: one per key, or NULL */
    Py_buffer views[];      /* n buffers, then the md blobs that were given */
} inflight;

ext_state *
ext_state_of_connector(Connector *self)
{
    return ext_state_of_type(Py_TYPE(self));
}

int
ext_check_open(Connector *self)
{
    if (self->closed) {
        ext_raise(ext_state_of_connector(self), LMCA_ECANCELED, 0, "the connector is closed");
        return -1;
    }
    return 0;
}

bool
ext_call_enter(Connector *self)
{
    if (ext_check_open(self) < 0)
        return false;
    pthread_mutex_lock(&self->lock);
    self->busy++;
    pthread_mutex_unlock(&self->lock);
    return true;
}

void
ext_call_leave(Connector *self)
{
    pthread_mutex_lock(&self->lock);
    if (--self->busy == 0)
        pthread_cond_broadcast(&self->idle);
    pthread_mutex_unlock(&self->lock);
    ext_log_sink_flush(self->logs);
}

/* ---------------------------------------------------------------------------
 * Construction: keyword arguments are settings (LMCache's extra_config names).
 */

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

static int
set_workers(ext_state *st, PyObject *value, unsigned *workers)
{
    long n = PyLong_Check(value) && !PyBool_Check(value) ? PyLong_AsLong(value) : -1;
    if (n >= 1 && n <= 256) {
        *workers = (unsigned)n;
        return 0;
    }
    PyErr_Clear();
    PyObject *repr = PyObject_Repr(value);
    char msg[200];
    snprintf(msg, sizeof msg, "config num_workers=%.60s: expected an int, 1 to 256",
             repr ? PyUnicode_AsUTF8(repr) : "?");
    Py_XDECREF(repr);
    ext_raise(st, LMCA_ECONFIG, 0, msg);
    return -1;
}

int
ext_apply_settings(ext_state *st, PyObject *kwargs, lmca_config_t *cfg, unsigned *workers,
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
            if (set_workers(st, value, workers) < 0)
                return -1;
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

/* Opens the handle and the pool with the GIL released. */
static int
open_engine(lmca_config_t *cfg, unsigned workers, lmca_t **h, lmca_pool_t **pool,
            lmca_err_t *err)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = lmca_open(cfg, h, err);
    if (rc == LMCA_OK && (rc = lmca_pool_open(*h, workers, pool, err)) != LMCA_OK)
        lmca_close(*h);
    Py_END_ALLOW_THREADS
    return rc;
}

static PyObject *
connector_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    ext_state *st = ext_state_of_type(type);
    lmca_config_t cfg;
    lmca_err_t err = {0};
    unsigned workers = 8;
    lmca_t *h = NULL;
    lmca_pool_t *pool = NULL;
    ext_log_sink *logs;
    PyObject *keep;

    if (PyTuple_GET_SIZE(args) > 0) {
        PyErr_SetString(PyExc_TypeError, "Connector() takes keyword arguments only");
        return NULL;
    }
    if ((logs = ext_log_sink_new()) == NULL)
        return PyErr_NoMemory();
    if ((keep = PyList_New(0)) == NULL) {
        ext_log_sink_free(logs);
        return NULL;
    }
    lmca_config_init(&cfg);
    cfg.log_cb = ext_log_sink_cb; /* the handle keeps it: the sink lives as long */
    cfg.log_udata = logs;
    int rc = ext_apply_settings(st, kwargs, &cfg, &workers, keep) < 0
                 ? LMCA_EINVAL
                 : open_engine(&cfg, workers, &h, &pool, &err);
    Py_DECREF(keep); /* lmca_open copied the strings */
    ext_log_sink_flush(logs);
    Connector *self = rc == LMCA_OK ? (Connector *)type->tp_alloc(type, 0) : NULL;
    if (self == NULL) {
        if (rc == LMCA_OK) { /* tp_alloc failed */
            Py_BEGIN_ALLOW_THREADS
            lmca_pool_destroy(pool);
            lmca_close(h);
            Py_END_ALLOW_THREADS
        } else if (!PyErr_Occurred()) {
            ext_raise_err(st, &err);
        }
        ext_log_sink_free(logs);
        return NULL;
    }
    self->h = h;
    self->pool = pool;
    self->logs = logs;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->idle, NULL);
    return (PyObject *)self;
}

/* ---------------------------------------------------------------------------
 * Arguments.
 */

const char *
ext_key_text(ext_state *st, PyObject *obj, Py_ssize_t i)
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

PyObject *
ext_key_list(ext_state *st, PyObject *keys)
{
    if (PyUnicode_Check(keys) || PyBytes_Check(keys) || PyByteArray_Check(keys)) {
        char msg[120];
        snprintf(msg, sizeof msg, "keys must be a list or tuple of str, not a single %s",
                 Py_TYPE(keys)->tp_name);
        ext_raise(st, LMCA_EINVAL, 0, msg);
        return NULL;
    }
    return PySequence_Fast(keys, "keys must be a list or tuple of str");
}

static void
inflight_release(inflight *f)
{
    if (f == NULL)
        return;
    for (Py_ssize_t i = 0; i < f->n; i++)
        PyBuffer_Release(&f->views[i]);
    Py_XDECREF(f->tags);
    PyMem_Free(f->opts);
    PyMem_Free(f);
}

/* Takes a view of `item` into f->views[f->n] (which counts it). `what` and
   `i` name it in the error. */
static int
take_view(ext_state *st, inflight *f, PyObject *item, bool writable, const char *what,
          Py_ssize_t i)
{
    int flags = writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
    char msg[160];

    if (PyObject_GetBuffer(item, &f->views[f->n], flags) == 0) {
        f->n++;
        return 0;
    }
    PyErr_Clear();
    snprintf(msg, sizeof msg, "%s %zd: %s, %s buffer required", what, i, Py_TYPE(item)->tp_name,
             writable ? "a writable C-contiguous" : "a C-contiguous");
    ext_raise(st, LMCA_EINVAL, 0, msg);
    return -1;
}

/* A sequence of exactly n items, or NULL with InvalidArgumentError. */
static PyObject *
sequence_of(ext_state *st, PyObject *obj, Py_ssize_t n, const char *what)
{
    char msg[160];
    PyObject *seq = PySequence_Fast(obj, "expected a list or tuple");
    if (seq == NULL || PySequence_Fast_GET_SIZE(seq) == n)
        return seq;
    snprintf(msg, sizeof msg, "%zd keys but %zd %s", n, PySequence_Fast_GET_SIZE(seq), what);
    Py_DECREF(seq);
    ext_raise(st, LMCA_EINVAL, 0, msg);
    return NULL;
}

/* Takes views of the n buffers (writable for a get). */
static int
take_buffers(ext_state *st, inflight *f, PyObject *bufs, Py_ssize_t n, bool writable)
{
    PyObject *seq = sequence_of(st, bufs, n, "buffers");
    int rc = seq ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++)
        rc = take_view(st, f, PySequence_Fast_GET_ITEM(seq, i), writable, "buffer", i);
    Py_XDECREF(seq);
    return rc;
}

/* Options of a set: md blobs (a sequence of n bytes-like or None), pin, tags. */
typedef struct {
    PyObject *mds, *serde, *ttl_class;
    int pin;
} set_options;

static int
take_options(ext_state *st, inflight *f, const set_options *o, Py_ssize_t n)
{
    PyObject *seq = NULL;
    const char *serde = o->serde ? PyUnicode_AsUTF8(o->serde) : NULL;
    const char *ttl_class = o->ttl_class ? PyUnicode_AsUTF8(o->ttl_class) : NULL;

    if ((o->serde && !serde) || (o->ttl_class && !ttl_class))
        return -1;
    if ((f->opts = PyMem_Calloc((size_t)(n ? n : 1), sizeof *f->opts)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* The pool copies the option structs, not the strings: hold them. */
    f->tags = PyTuple_Pack(2, o->serde ? o->serde : Py_None, o->ttl_class ? o->ttl_class : Py_None);
    if (f->tags == NULL || (o->mds && (seq = sequence_of(st, o->mds, n, "md blobs")) == NULL))
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *md = seq ? PySequence_Fast_GET_ITEM(seq, i) : Py_None;
        f->opts[i] = (lmca_put_opts_t){.serde = serde, .ttl_class = ttl_class, .pin = o->pin};
        if (md == Py_None)
            continue;
        if (take_view(st, f, md, false, "md", i) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        f->opts[i].md = f->views[f->n - 1].buf;
        f->opts[i].md_len = (size_t)f->views[f->n - 1].len;
    }
    Py_XDECREF(seq);
    return 0;
}

/* ---------------------------------------------------------------------------
 * The asynchronous surface (LMCache's native connector contract).
 */

/* Keys as C strings (borrowed from `seq`'s items). */
static const char **
key_array(ext_state *st, PyObject *seq, Py_ssize_t n)
{
    const char **ks = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (ks == NULL)
        return (const char **)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((ks[i] = ext_key_text(st, PySequence_Fast_GET_ITEM(seq, i), i)) == NULL) {
            PyMem_Free(ks);
            return NULL;
        }
    }
    return ks;
}

/* What one submit_batch_* call asks for. */
typedef struct {
    lmca_op op;
    PyObject *keys;
    PyObject *bufs;           /* GET, SET, FILL */
    const set_options *opts;  /* SET, or NULL */
    PyObject *pendings;       /* FILL: Pending objects of a STAT */
    bool pin;                 /* TOUCH */
} submit_args;

/* A FILL's gets: copies of its Pendings' (not yet consumed, each once). */
static lmca_get_t *
pending_gets(ext_state *st, PyObject *pendings, Py_ssize_t n, PyObject **seq_out)
{
    PyObject *seq = sequence_of(st, pendings, n, "pendings");
    lmca_get_t *gets;
    char msg[160];

    if (seq == NULL)
        return NULL;
    if ((gets = PyMem_Calloc((size_t)(n ? n : 1), sizeof *gets)) == NULL) {
        Py_DECREF(seq);
        return (lmca_get_t *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const lmca_get_t *g = ext_pending_check(st, item) ? ext_pending_get((ext_pending *)item)
                                                          : NULL;
        for (Py_ssize_t k = 0; g != NULL && k < i; k++)
            if (PySequence_Fast_GET_ITEM(seq, k) == item)
                g = NULL; /* twice: its payload would be placed, and freed, twice */
        if (g == NULL) {
            snprintf(msg, sizeof msg, "pending %zd: %s", i,
                     ext_pending_check(st, item) ? "already handed to a fill"
                                                 : "expected a Pending of a stat");
            ext_raise(st, LMCA_EINVAL, 0, msg);
            PyMem_Free(gets);
            Py_DECREF(seq);
            return NULL;
        }
        gets[i] = *g;
    }
    *seq_out = seq;
    return gets;
}

static PyObject *
submit(Connector *self, const submit_args *a)
{
    ext_state *st = ext_state_of_connector(self);
    bool with_buffers = a->op == LMCA_OP_GET || a->op == LMCA_OP_SET || a->op == LMCA_OP_FILL;
    lmca_err_t err = {0};
    uint64_t id = 0;
    void **ptrs = NULL;
    size_t *lens = NULL;
    inflight *f = NULL;
    const char **ks = NULL;
    lmca_get_t *gets = NULL;
    PyObject *seq, *pending_seq = NULL;
    int rc = -1;

    if (ext_check_open(self) < 0 || (seq = ext_key_list(st, a->keys)) == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    size_t nviews = (size_t)n * (a->opts && a->opts->mds ? 2 : 1);
    if ((ks = key_array(st, seq, n)) == NULL)
        goto out;
    f = PyMem_Calloc(1, sizeof *f + nviews * sizeof(Py_buffer));
    ptrs = PyMem_Malloc(sizeof(void *) * (size_t)(n ? n : 1));
    lens = PyMem_Malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    if (f == NULL || ptrs == NULL || lens == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    if ((with_buffers && take_buffers(st, f, a->bufs, n, a->op != LMCA_OP_SET) < 0) ||
        (a->opts && take_options(st, f, a->opts, n) < 0) ||
        (a->op == LMCA_OP_FILL && (gets = pending_gets(st, a->pendings, n, &pending_seq)) == NULL))
        goto out;
    for (Py_ssize_t i = 0; with_buffers && i < n; i++) {
        ptrs[i] = f->views[i].buf;
        lens[i] = (size_t)f->views[i].len;
    }
    lmca_batch_t b = {.op = a->op, .n = (size_t)n, .keys = ks,
                      .bufs = with_buffers ? ptrs : NULL, .lens = with_buffers ? lens : NULL,
                      .opts = f->opts, .gets = gets, .pin = a->pin, .udata = f};
    /* Never waits for I/O: the pool copies the keys and queues the work. Nothing
       above ran Python code since ext_check_open that could close us: buffer
       exports of Python classes could, so check again. */
    if (ext_check_open(self) < 0)
        goto out;
    if (lmca_pool_submit(self->pool, &b, &id, &err) != LMCA_OK) {
        ext_raise_err(st, &err);
        goto out;
    }
    for (Py_ssize_t i = 0; pending_seq && i < n; i++) /* the FILL owns their payloads */
        ext_pending_consume((ext_pending *)PySequence_Fast_GET_ITEM(pending_seq, i));
    f = NULL; /* the completion owns it now */
    rc = 0;
out:
    inflight_release(f);
    PyMem_Free(ks);
    PyMem_Free(ptrs);
    PyMem_Free(lens);
    PyMem_Free(gets);
    Py_XDECREF(pending_seq);
    Py_DECREF(seq);
    return rc == 0 ? PyLong_FromUnsignedLongLong(id) : NULL;
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
    submit_args a = {.op = LMCA_OP_GET, .keys = args[0], .bufs = nargs > 1 ? args[1] : NULL};
    return two_args("submit_batch_get", nargs) ? submit(self, &a) : NULL;
}

static PyObject *
submit_batch_set(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"keys", "buffers", "mds", "pin", "serde", "ttl_class", NULL};
    set_options o = {NULL};
    submit_args a = {.op = LMCA_OP_SET};

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OpO!O!:submit_batch_set", kwlist, &a.keys,
                                     &a.bufs, &o.mds, &o.pin, &PyUnicode_Type, &o.serde,
                                     &PyUnicode_Type, &o.ttl_class))
        return NULL;
    if (o.mds == Py_None)
        o.mds = NULL;
    a.opts = !o.mds && !o.pin && !o.serde && !o.ttl_class ? NULL : &o;
    return submit(self, &a);
}

static PyObject *
submit_keys(Connector *self, lmca_op op, PyObject *keys)
{
    submit_args a = {.op = op, .keys = keys};
    return submit(self, &a);
}

static PyObject *
submit_batch_exists(Connector *self, PyObject *keys)
{
    return submit_keys(self, LMCA_OP_EXISTS, keys);
}

static PyObject *
submit_batch_prefix(Connector *self, PyObject *keys)
{
    return submit_keys(self, LMCA_OP_PREFIX, keys);
}

static PyObject *
submit_batch_delete(Connector *self, PyObject *keys)
{
    return submit_keys(self, LMCA_OP_DELETE, keys);
}

static PyObject *
submit_batch_stat(Connector *self, PyObject *keys)
{
    return submit_keys(self, LMCA_OP_STAT, keys);
}

static PyObject *
submit_batch_fill(Connector *self, PyObject *const *args, Py_ssize_t nargs)
{
    submit_args a = {.op = LMCA_OP_FILL};
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "submit_batch_fill() takes 3 positional arguments (keys, pendings, "
                     "buffers), %zd given",
                     nargs);
        return NULL;
    }
    a.keys = args[0], a.pendings = args[1], a.bufs = args[2];
    return submit(self, &a);
}

static PyObject *
submit_batch_touch(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"keys", "pin", NULL};
    int pin = 0;
    submit_args a = {.op = LMCA_OP_TOUCH};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:submit_batch_touch", kwlist, &a.keys,
                                     &pin))
        return NULL;
    a.pin = pin;
    return submit(self, &a);
}

static PyObject *
event_fd(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (ext_check_open(self) < 0)
        return NULL;
    return PyLong_FromLong(lmca_pool_fd(self->pool));
}

/* Per-key results: bools, or for a STAT a Pending (or None) per key, which
   takes over what the get holds. */
static PyObject *
results_list(ext_state *st, lmca_completion_t *c)
{
    PyObject *results = PyList_New((Py_ssize_t)c->n), *item;
    for (size_t i = 0; results != NULL && i < c->n; i++) {
        if (c->op != LMCA_OP_STAT)
            item = Py_NewRef(c->results[i] ? Py_True : Py_False);
        else if (c->results[i])
            item = ext_pending_new(st, &c->gets[i]);
        else
            item = Py_NewRef(Py_None);
        if (item == NULL)
            Py_CLEAR(results);
        else
            PyList_SET_ITEM(results, (Py_ssize_t)i, item);
    }
    return results;
}

/* (future_id, ok, error, per-key results) for one completion. */
static PyObject *
completion_tuple(ext_state *st, lmca_completion_t *c)
{
    PyObject *results = results_list(st, c);
    if (results == NULL)
        return NULL;
    return Py_BuildValue("(KOsN)", (unsigned long long)c->id,
                         c->status == LMCA_OK ? Py_True : Py_False,
                         c->status == LMCA_OK ? "" : c->error, results);
}

/* Turns drained completions into tuples (appended to `out`, if not NULL),
   releasing their buffers and freeing them whatever happens. */
static int
settle_completions(ext_state *st, lmca_completion_t *c, PyObject *out)
{
    int rc = 0;
    while (c) {
        lmca_completion_t *next = c->next;
        if (out && rc == 0) {
            PyObject *t = completion_tuple(st, c);
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
    if (settle_completions(ext_state_of_connector(self), lmca_pool_drain(self->pool), out) < 0)
        Py_CLEAR(out);
    ext_log_sink_flush(self->logs); /* what the workers noticed */
    return out;
}

/* Stops the workers (every accepted batch then completes, cancelled if it had
   not run), releases every buffer and keeps the completions for one more
   drain_completions(). Blocking calls in other threads finish first: close
   waits for them on a condition, with the GIL released. */
static PyObject *
connector_close(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (self->closed)
        Py_RETURN_NONE;
    self->closed = true; /* no new call starts from here (ext_call_enter) */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    while (self->busy > 0)
        pthread_cond_wait(&self->idle, &self->lock);
    pthread_mutex_unlock(&self->lock);
    lmca_pool_shutdown(self->pool);
    Py_END_ALLOW_THREADS
    self->leftovers = PyList_New(0);
    int rc = settle_completions(ext_state_of_connector(self), lmca_pool_drain(self->pool),
                                self->leftovers);
    Py_BEGIN_ALLOW_THREADS
    lmca_pool_destroy(self->pool);
    lmca_close(self->h);
    Py_END_ALLOW_THREADS
    self->pool = NULL;
    self->h = NULL;
    ext_log_sink_flush(self->logs); /* the handle is gone: nothing logs any more */
    ext_log_sink_free(self->logs);
    self->logs = NULL;
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
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
    pthread_cond_destroy(&self->idle);
    pthread_mutex_destroy(&self->lock);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyMethodDef connector_methods[] = {
    {"event_fd", (PyCFunction)event_fd, METH_NOARGS,
     "event_fd() -> int: readable when completions wait; drain_completions() clears it."},
    {"submit_batch_get", (PyCFunction)(void (*)(void))submit_batch_get, METH_FASTCALL,
     "submit_batch_get(keys, buffers) -> int: read each chunk into its writable buffer, whose "
     "size must be the chunk's."},
    {"submit_batch_set", (PyCFunction)(void (*)(void))submit_batch_set,
     METH_VARARGS | METH_KEYWORDS,
     "submit_batch_set(keys, buffers, *, mds=None, pin=False, serde=None, ttl_class=None) -> "
     "int: store each buffer under its key; mds is a list of n bytes-like or None (held, like "
     "the buffers, until drained)."},
    {"submit_batch_exists", (PyCFunction)submit_batch_exists, METH_O,
     "submit_batch_exists(keys) -> int: per-key presence."},
    {"submit_batch_prefix", (PyCFunction)submit_batch_prefix, METH_O,
     "submit_batch_prefix(keys) -> int: per-key presence; the hit prefix is the leading Trues."},
    {"submit_batch_delete", (PyCFunction)submit_batch_delete, METH_O,
     "submit_batch_delete(keys) -> int: remove each key."},
    {"submit_batch_stat", (PyCFunction)submit_batch_stat, METH_O,
     "submit_batch_stat(keys) -> int: read each chunk's metadata (and hold a one-record "
     "chunk's payload); the completion's results are a Pending or None per key."},
    {"submit_batch_fill", (PyCFunction)(void (*)(void))submit_batch_fill, METH_FASTCALL,
     "submit_batch_fill(keys, pendings, buffers) -> int: finish the stats' gets into writable "
     "buffers of at least each Pending's nbytes; the pendings are consumed."},
    {"submit_batch_touch", (PyCFunction)(void (*)(void))submit_batch_touch,
     METH_VARARGS | METH_KEYWORDS,
     "submit_batch_touch(keys, *, pin=False) -> int: refresh each chunk's TTL (pin: never "
     "expire)."},
    {"drain_completions", (PyCFunction)drain_completions, METH_NOARGS,
     "drain_completions() -> list[(future_id, ok, error, list[bool])]; releases their buffers "
     "and clears the event fd."},
    {"close", (PyCFunction)connector_close, METH_NOARGS,
     "close(): wait for blocking calls, cancel queued work, join the workers, release every "
     "buffer. Idempotent."},
    {"put", (PyCFunction)(void (*)(void))ext_put, METH_VARARGS | METH_KEYWORDS,
     "put(key, buffer, *, md=None, serde=None, ttl_class=None, pin=False): store, blocking."},
    {"get", (PyCFunction)ext_get, METH_VARARGS,
     "get(key, buffer) -> int | None: read into buffer; bytes read, or None on a miss."},
    {"stat", (PyCFunction)ext_stat, METH_O, "stat(key) -> dict | None: the meta record."},
    {"exists", (PyCFunction)ext_exists, METH_O, "exists(key) -> bool"},
    {"remove", (PyCFunction)ext_remove, METH_O, "remove(key) -> bool: False if nothing was there."},
    {"touch", (PyCFunction)(void (*)(void))ext_touch, METH_VARARGS | METH_KEYWORDS,
     "touch(key, pin=False) -> bool: refresh the TTL (pin: never expire)."},
    {"prefix", (PyCFunction)ext_prefix, METH_O, "prefix(keys) -> int: leading hits, blocking."},
    {"ping", (PyCFunction)ext_ping, METH_NOARGS, "ping() -> True, or raises ConnectionError."},
    {"limits", (PyCFunction)ext_limits, METH_NOARGS, "limits() -> dict: the sizes in force."},
    {"plan", (PyCFunction)ext_plan, METH_O,
     "plan(nbytes) -> (nseg, seg_b, last_b): how a put of nbytes is split; pure."},
    {"list_keys", (PyCFunction)(void (*)(void))ext_list_keys, METH_VARARGS | METH_KEYWORDS,
     "list_keys(*, limit=None) -> (list[str], int): the chunk keys of the set, scanned, "
     "and how many chunks were stored without their key (send_key off). Slow."},
    {"info", (PyCFunction)ext_info, METH_O,
     "info(command) -> list[(node, address, response)]: one info command to every node "
     "the client sees; response is the value after \"command\\t\"."},
    {"cluster_size", (PyCFunction)ext_cluster_size, METH_NOARGS,
     "cluster_size() -> int: nodes in the client's current view; no I/O."},
    {"scan", (PyCFunction)(void (*)(void))ext_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(*, records=False, limit=None) -> list[dict]: the valid meta records (chunks, "
     "\"key\" without \"|m\"), or with records=True every schema record with its \"kind\" "
     "and stored key; ttl -1 = never expires. Slow."},
    {"sweep", (PyCFunction)ext_sweep, METH_NOARGS,
     "sweep() -> list[dict]: records no reader can use (orphan_segment, broken_meta, "
     "corrupt); removes nothing. Slow."},
    {"remove_record", (PyCFunction)ext_remove_record, METH_O,
     "remove_record(digest) -> bool: remove one record by its 20-byte digest; False if it "
     "was already gone."},
    {"inspect", (PyCFunction)ext_inspect, METH_O,
     "inspect(key) -> dict | None: the meta record (as stat, ttl -1 = never), each "
     "segment's state and the payload's CRC verdict; None on a miss."},
    {"eviction", (PyCFunction)ext_eviction, METH_NOARGS,
     "eviction() -> dict: the eviction plan in force (enabled, records, target, per_second: "
     "the most records one second of the shared clock gets), from its last look at "
     "the namespace"},
    {"stats", (PyCFunction)ext_stats, METH_NOARGS,
     "stats() -> dict: counters since open (pool work, corrupt records, aborted puts, "
     "records on the fast path and on the client's calls, backpressure: puts_retried, "
     "write_retries, dropped_full, dropped_busy, dropped_unsent, dropped_unreachable, "
     "dropped_paced, puts_paced; the shared clock: clock_reservations, clock_resets, "
     "clock_local, clock_fallbacks, clock_busy, clock_overloaded; hits moved to the head: hits_touched, hits_fresh, "
     "hits_unbudgeted, touch_bytes, touches_failed; a stalled NSUP mended: mends, mended_records; and full: stores "
     "are being dropped unsent)."},
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
