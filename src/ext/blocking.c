/*
 * blocking.c - the Connector's blocking calls, for the Python glue: each runs
 * one engine call with the GIL released (EXT_BLOCKING, connector.h). Misses
 * are data (None or False), never exceptions.
 */
#include "connector.h"

PyObject *
ext_put(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "buffer", "md", "serde", "ttl_class", "pin", NULL};
    const char *key, *serde = NULL, *ttl_class = NULL;
    Py_buffer buf, md = {0};
    int pin = 0, rc = LMCA_OK;
    lmca_err_t err = {0};
    bool ok;

    if (ext_check_open(self) < 0 ||
        !PyArg_ParseTupleAndKeywords(args, kwargs, "sy*|$z*zzp", kwlist, &key, &buf, &md, &serde,
                                     &ttl_class, &pin))
        return NULL;
    lmca_put_opts_t o = {.md = md.buf, .md_len = md.buf ? (size_t)md.len : 0, .serde = serde,
                         .ttl_class = ttl_class, .pin = pin};
    EXT_BLOCKING(self, ok, rc = lmca_put(self->h, key, buf.buf, (size_t)buf.len, &o, &err));
    PyBuffer_Release(&buf);
    if (md.obj)
        PyBuffer_Release(&md);
    if (!ok)
        return NULL;
    if (rc != LMCA_OK)
        return ext_raise_err(ext_state_of_connector(self), &err);
    Py_RETURN_NONE;
}

PyObject *
ext_get(Connector *self, PyObject *args)
{
    const char *key;
    Py_buffer buf;
    size_t got = 0;
    int rc = LMCA_OK;
    lmca_err_t err = {0};
    bool ok;

    if (ext_check_open(self) < 0 || !PyArg_ParseTuple(args, "sw*", &key, &buf))
        return NULL;
    EXT_BLOCKING(self, ok, rc = lmca_get(self->h, key, buf.buf, (size_t)buf.len, &got, NULL, &err));
    PyBuffer_Release(&buf);
    if (!ok)
        return NULL;
    if (rc == LMCA_MISS)
        Py_RETURN_NONE;
    if (rc != LMCA_OK)
        return ext_raise_err(ext_state_of_connector(self), &err);
    return PyLong_FromSize_t(got);
}

int
ext_dict_take(PyObject *dict, const char *name, PyObject *value)
{
    int rc = value ? PyDict_SetItemString(dict, name, value) : -1;
    Py_XDECREF(value);
    return rc;
}

PyObject *
ext_meta_dict(const lmca_meta_t *m)
{
    return Py_BuildValue(
        "{s:I,s:I,s:K,s:K,s:K,s:s,s:s,s:O,s:L,s:N}", "ver", m->ver, "nseg", m->nseg, "seg_b",
        (unsigned long long)m->seg_b, "tot_b", (unsigned long long)m->tot_b, "wid",
        (unsigned long long)m->wid, "serde", m->serde, "ttl_class", m->ttl_class, "pin",
        m->pin ? Py_True : Py_False, "created_at", (long long)m->created_at, "crc32",
        m->has_crc32 ? PyLong_FromUnsignedLong(m->crc32) : Py_NewRef(Py_None));
}

PyObject *
ext_md_bytes(const lmca_meta_t *m)
{
    return PyBytes_FromStringAndSize(m->md ? (const char *)m->md : "",
                                     (Py_ssize_t)(m->md ? m->md_len : 0));
}

/* stat()'s dict: the fields, md, and the TTL as the server counts it
   (0xFFFFFFFF = never expires). */
static PyObject *
stat_dict(const lmca_meta_t *m)
{
    PyObject *d = ext_meta_dict(m);
    if (d != NULL && (ext_dict_take(d, "md", ext_md_bytes(m)) < 0 ||
                      ext_dict_take(d, "ttl", PyLong_FromUnsignedLong(m->ttl)) < 0))
        Py_CLEAR(d);
    return d;
}

PyObject *
ext_stat(Connector *self, PyObject *arg)
{
    ext_state *st = ext_state_of_connector(self);
    const char *key = ext_key_text(st, arg, -1);
    lmca_meta_t m = {0};
    lmca_err_t err = {0};
    int rc = LMCA_OK;
    bool ok;

    if (key == NULL)
        return NULL;
    EXT_BLOCKING(self, ok, rc = lmca_stat(self->h, key, &m, &err));
    if (!ok)
        return NULL;
    PyObject *out = rc == LMCA_OK     ? stat_dict(&m)
                    : rc == LMCA_MISS ? Py_NewRef(Py_None)
                                      : ext_raise_err(st, &err);
    lmca_meta_clear(&m);
    return out;
}

/* exists / remove: True for OK, False for a miss. */
static PyObject *
key_call(Connector *self, PyObject *arg, int (*fn)(lmca_t *, const char *, lmca_err_t *))
{
    ext_state *st = ext_state_of_connector(self);
    const char *key = ext_key_text(st, arg, -1);
    lmca_err_t err = {0};
    int rc = LMCA_OK;
    bool ok;

    if (key == NULL)
        return NULL;
    EXT_BLOCKING(self, ok, rc = fn(self->h, key, &err));
    if (!ok)
        return NULL;
    if (rc < 0)
        return ext_raise_err(st, &err);
    return PyBool_FromLong(rc == LMCA_OK);
}

PyObject *
ext_exists(Connector *self, PyObject *arg)
{
    return key_call(self, arg, lmca_exists);
}

PyObject *
ext_remove(Connector *self, PyObject *arg)
{
    return key_call(self, arg, lmca_remove);
}

PyObject *
ext_touch(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "pin", NULL};
    const char *key;
    int pin = 0, rc = LMCA_OK;
    lmca_err_t err = {0};
    bool ok;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s|p", kwlist, &key, &pin))
        return NULL;
    EXT_BLOCKING(self, ok, rc = lmca_touch(self->h, key, pin, &err));
    if (!ok)
        return NULL;
    if (rc < 0)
        return ext_raise_err(ext_state_of_connector(self), &err);
    return PyBool_FromLong(rc == LMCA_OK);
}

PyObject *
ext_prefix(Connector *self, PyObject *keys)
{
    ext_state *st = ext_state_of_connector(self);
    PyObject *seq = ext_key_list(st, keys);
    const char **ks;
    size_t count = 0;
    lmca_err_t err = {0};
    int rc = LMCA_OK;
    bool ok = true;

    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((ks = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1))) == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n && ok; i++)
        ok = (ks[i] = ext_key_text(st, PySequence_Fast_GET_ITEM(seq, i), i)) != NULL;
    if (ok)
        EXT_BLOCKING(self, ok, rc = lmca_prefix(self->h, ks, (size_t)n, &count, NULL, &err));
    PyMem_Free(ks);
    Py_DECREF(seq);
    if (!ok)
        return NULL;
    if (rc != LMCA_OK)
        return ext_raise_err(st, &err);
    return PyLong_FromSize_t(count);
}

PyObject *
ext_ping(Connector *self, PyObject *Py_UNUSED(ignored))
{
    lmca_err_t err = {0};
    int rc = LMCA_OK;
    bool ok;

    EXT_BLOCKING(self, ok, rc = lmca_ping(self->h, &err));
    if (!ok)
        return NULL;
    if (rc != LMCA_OK)
        return ext_raise_err(ext_state_of_connector(self), &err);
    Py_RETURN_TRUE;
}

/* plan(nbytes) -> (nseg, seg_b, last_b): how a put of nbytes is split under the
   limits in force; pure, so metrics can report what puts do without the engine. */
PyObject *
ext_plan(Connector *self, PyObject *arg)
{
    lmca_plan_t plan;
    lmca_err_t err = {0};
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);

    if (n == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ext_check_open(self) < 0)
        return NULL;
    if (lmca_plan(lmca_limits(self->h), n, &plan, &err) != LMCA_OK)
        return ext_raise_err(ext_state_of_connector(self), &err);
    return Py_BuildValue("(IKK)", plan.nseg, (unsigned long long)plan.seg_b,
                         (unsigned long long)plan.last_b);
}

PyObject *
ext_limits(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (ext_check_open(self) < 0)
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

/* Sets d[name] = v; false with an exception set. */
static bool
set_count(PyObject *d, const char *name, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    bool ok = o != NULL && PyDict_SetItemString(d, name, o) == 0;
    Py_XDECREF(o);
    return ok;
}

PyObject *
ext_stats(Connector *self, PyObject *Py_UNUSED(ignored))
{
    lmca_pool_stats_t p;
    lmca_stats_t e;
    PyObject *d;

    if (ext_check_open(self) < 0)
        return NULL;
    ext_log_sink_flush(self->logs);
    lmca_pool_stats(self->pool, &p);
    lmca_stats(self->h, &e);
    const struct {
        const char *name;
        uint64_t value;
    } counts[] = {
#define C(s, f) {#f, (s).f}
        C(p, submitted), C(p, completed), C(p, canceled), C(p, queued), C(p, bytes_read),
        C(p, bytes_written), C(e, corrupt), C(e, torn), C(e, crc_mismatch), C(e, puts_aborted),
        C(e, segments_removed), C(e, segments_left), C(e, fast_ops), C(e, client_ops),
        C(e, guesses_confirmed), C(e, guesses_missed), C(e, puts_retried), C(e, write_retries),
        C(e, dropped_full), C(e, dropped_busy), C(e, dropped_unsent), C(e, dropped_unreachable),
        C(e, dropped_paced), C(e, puts_paced), C(e, clock_reservations), C(e, clock_resets),
        C(e, clock_local), C(e, clock_fallbacks), C(e, clock_busy),
        C(e, clock_overloaded), C(e, hits_touched), C(e, hits_fresh),
        C(e, hits_unbudgeted), C(e, touch_bytes), C(e, touches_failed), C(e, mends),
        C(e, mended_records),
#undef C
    };
    if ((d = PyDict_New()) == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (!set_count(d, counts[i].name, counts[i].value)) {
            Py_DECREF(d);
            return NULL;
        }
    if (PyDict_SetItemString(d, "full", e.full ? Py_True : Py_False) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyObject *
ext_eviction(Connector *self, PyObject *Py_UNUSED(ignored))
{
    lmca_eviction_t e;

    if (ext_check_open(self) < 0)
        return NULL;
    lmca_eviction(self->h, &e);
    return Py_BuildValue("{s:O,s:K,s:K,s:I,s:K,s:K,s:O,s:K}", "enabled",
                         e.enabled ? Py_True : Py_False, "records", (unsigned long long)e.records,
                         "target", (unsigned long long)e.target, "per_second",
                         (unsigned)e.per_second, "lead_seconds",
                         (unsigned long long)e.lead_seconds, "bytes_per_second",
                         (unsigned long long)e.bytes_per_second, "device",
                         e.device ? Py_True : Py_False, "cut_void_time",
                         (unsigned long long)e.cut_void_time);
}

/* ---------------------------------------------------------------------------
 * list_keys: the chunk keys of the set, for LMCache's list() and the CLI.
 */

/* Keys gathered on the scan's threads (no GIL there), handed to Python after. */
typedef struct {
    pthread_mutex_t lock;
    char **keys;
    size_t n, cap, unnamed, limit;
    bool nomem;
} key_sink;

static bool
sink_key(void *udata, const lmca_scan_rec_t *rec)
{
    key_sink *s = udata;
    bool more = true;
    size_t len;

    pthread_mutex_lock(&s->lock);
    if (rec->key == NULL || (len = strlen(rec->key)) < 3) {
        s->unnamed++; /* written without send_key: only its digest is stored */
    } else if (s->n == s->cap && s->n < s->limit) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        char **grown = realloc(s->keys, cap * sizeof *grown);
        if (grown == NULL)
            s->nomem = true;
        else
            s->keys = grown, s->cap = cap;
    }
    if (rec->key != NULL && len >= 3 && !s->nomem && s->n < s->limit) {
        char *k = malloc(len - 1);
        if (k == NULL) {
            s->nomem = true;
        } else {
            memcpy(k, rec->key, len - 2); /* without "|m" */
            k[len - 2] = '\0';
            s->keys[s->n++] = k;
        }
    }
    more = !s->nomem && s->n < s->limit;
    pthread_mutex_unlock(&s->lock);
    return more;
}

static PyObject *
keys_and_unnamed(key_sink *s)
{
    PyObject *list = PyList_New((Py_ssize_t)s->n), *out = NULL;
    for (size_t i = 0; list != NULL && i < s->n; i++) {
        PyObject *k = PyUnicode_DecodeUTF8(s->keys[i], (Py_ssize_t)strlen(s->keys[i]), "replace");
        if (k == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, k);
    }
    if (list != NULL)
        out = Py_BuildValue("(Nn)", list, (Py_ssize_t)s->unnamed);
    return out;
}

PyObject *
ext_list_keys(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"limit", NULL};
    Py_ssize_t limit = PY_SSIZE_T_MAX;
    key_sink s = {.keys = NULL};
    lmca_err_t err = {0};
    int rc = LMCA_OK;
    bool ok;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$n:list_keys", kwlist, &limit))
        return NULL;
    s.limit = limit < 0 ? 0 : (size_t)limit;
    pthread_mutex_init(&s.lock, NULL);
    EXT_BLOCKING(self, ok, rc = lmca_scan(self->h, LMCA_SCAN_META, sink_key, &s, &err));
    PyObject *out = NULL;
    if (ok && s.nomem)
        out = PyErr_NoMemory();
    else if (ok && rc != LMCA_OK)
        ext_raise_err(ext_state_of_connector(self), &err);
    else if (ok)
        out = keys_and_unnamed(&s);
    for (size_t i = 0; i < s.n; i++)
        free(s.keys[i]);
    free(s.keys);
    pthread_mutex_destroy(&s.lock);
    return out;
}
