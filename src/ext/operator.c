/*
 * operator.c - the Connector's calls for operators (the lmcache-aerospike CLI:
 * probe, stats, ls, inspect, repair): info on every node, scans of the set, the
 * orphan sweep, removal by digest, and one chunk taken apart. Each runs one
 * engine call with the GIL released (EXT_BLOCKING). What the engine hands to a
 * callback meanwhile is copied into C memory (its callbacks run without the
 * GIL, a scan's on libaerospike's threads), and made into Python objects after.
 */
#include "connector.h"

/* Room for one more of `each` bytes after n of *cap: `items` itself, or a
   larger copy of it; NULL when out of memory (`items` is then left as it was). */
static void *
grow(void *items, size_t *cap, size_t n, size_t each)
{
    size_t more = *cap ? *cap * 2 : 64;
    void *p;

    if (n < *cap)
        return items;
    if (more > SIZE_MAX / each || (p = realloc(items, more * each)) == NULL)
        return NULL;
    *cap = more;
    return p;
}

/* Server text as str: keys and answers are untrusted bytes, so undecodable
   ones are replaced rather than failing the whole call. */
static PyObject *
text(const char *s)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* A list of `n` items, item i made by make(ctx, i); NULL with an error set
   when one cannot be made. */
static PyObject *
list_of(size_t n, PyObject *(*make)(const void *ctx, size_t i), const void *ctx)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *item = make(ctx, i);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* Seconds left, -1 for never expires (the server's 0xFFFFFFFF). */
static PyObject *
ttl_obj(uint32_t ttl)
{
    return ttl == UINT32_MAX ? PyLong_FromLong(-1) : PyLong_FromUnsignedLong(ttl);
}

static const char *
kind_name(lmca_rec_kind kind)
{
    return kind == LMCA_REC_META ? "meta" : kind == LMCA_REC_SEGMENT ? "segment" : "unknown";
}

/* After a blocking call whose callbacks filled a sink: raises the engine's
   error, or MemoryError when the sink ran out (it stopped the call, which the
   engine then reports as a success), and says whether it did. */
static bool
raised(Connector *self, int rc, bool nomem, const lmca_err_t *err)
{
    if (nomem)
        PyErr_NoMemory();
    else if (rc < 0)
        ext_raise_err(ext_state_of_connector(self), err);
    return nomem || rc < 0;
}

/* ---------------------------------------------------------------------------
 * info(command) -> [(node, address, response)]
 */

typedef struct {
    char *node, *address, *response; /* one allocation, at node */
} info_row;

typedef struct {
    info_row *rows;
    size_t n, cap;
    bool nomem;
} info_sink;

static bool
sink_info(void *udata, const char *node, const char *address, const char *response)
{
    info_sink *s = udata;
    size_t ln = strlen(node) + 1, la = strlen(address) + 1, lr = strlen(response) + 1;
    char *p;

    info_row *rows = grow(s->rows, &s->cap, s->n, sizeof *rows);

    if (rows != NULL)
        s->rows = rows;
    if (rows == NULL || (p = malloc(ln + la + lr)) == NULL) {
        s->nomem = true;
        return false;
    }
    s->rows[s->n++] = (info_row){memcpy(p, node, ln), memcpy(p + ln, address, la),
                                 memcpy(p + ln + la, response, lr)};
    return true;
}

/* (node, address, response) of row i. */
static PyObject *
info_tuple(const void *ctx, size_t i)
{
    const info_row *r = &((const info_sink *)ctx)->rows[i];
    const char *parts[3] = {r->node, r->address, r->response};
    PyObject *t = PyTuple_New(3);

    for (Py_ssize_t k = 0; t != NULL && k < 3; k++) {
        PyObject *part = text(parts[k]);
        if (part == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, k, part);
    }
    return t;
}

PyObject *
ext_info(Connector *self, PyObject *arg)
{
    info_sink s = {.rows = NULL};
    lmca_err_t err = {0};
    Py_ssize_t len;
    const char *command;
    int rc = LMCA_OK;
    bool ok;

    if (!PyUnicode_Check(arg))
        return ext_raise(ext_state_of_connector(self), LMCA_EINVAL, 0,
                         "info: the command must be a str");
    if ((command = PyUnicode_AsUTF8AndSize(arg, &len)) == NULL)
        return NULL;
    if ((Py_ssize_t)strlen(command) != len) /* the engine would see a shorter one */
        return ext_raise(ext_state_of_connector(self), LMCA_EINVAL, 0,
                         "info: the command holds a NUL character");
    EXT_BLOCKING(self, ok, rc = lmca_info(self->h, command, sink_info, &s, &err));
    PyObject *out = ok && !raised(self, rc, s.nomem, &err) ? list_of(s.n, info_tuple, &s) : NULL;
    for (size_t i = 0; i < s.n; i++)
        free(s.rows[i].node);
    free(s.rows);
    return out;
}

PyObject *
ext_cluster_size(Connector *self, PyObject *Py_UNUSED(ignored))
{
    if (ext_check_open(self) < 0)
        return NULL;
    /* No I/O: the client's node list, read under the GIL like limits(). */
    return PyLong_FromUnsignedLong(lmca_cluster_size(self->h));
}

/* ---------------------------------------------------------------------------
 * scan(*, records=False, limit=None) -> [dict]
 */

typedef struct {
    uint8_t kind; /* lmca_rec_kind */
    uint8_t digest[20];
    char *key;     /* malloc'd, or NULL when the record's key is not stored */
    uint32_t ttl;
    uint64_t wid;
    bool has_meta;
    lmca_meta_t meta; /* without md (scans do not read it) */
} scan_row;

typedef struct {
    pthread_mutex_t lock; /* the client may scan nodes on several threads */
    scan_row *rows;
    size_t n, cap, limit;
    bool chunk_keys; /* meta records as chunks: "<key>|m" becomes "<key>" */
    bool nomem;
} scan_sink;

/* A copy of the stored key, as a chunk's key when asked; false when out of
   memory. A meta record stored under a key without "|m" (not one of ours)
   keeps its key as it is. */
static bool
copy_key(char **out, const char *key, bool chunk_keys)
{
    size_t len = key ? strlen(key) : 0;

    *out = NULL;
    if (key == NULL)
        return true;
    if (chunk_keys && len >= 2 && strcmp(key + len - 2, "|m") == 0)
        len -= 2;
    if ((*out = malloc(len + 1)) == NULL)
        return false;
    memcpy(*out, key, len);
    (*out)[len] = '\0';
    return true;
}

static void
take_row(scan_sink *s, const lmca_scan_rec_t *rec)
{
    scan_row *r = grow(s->rows, &s->cap, s->n, sizeof *r);

    if (r == NULL) {
        s->nomem = true;
        return;
    }
    s->rows = r;
    r = &s->rows[s->n];
    *r = (scan_row){.kind = (uint8_t)rec->kind, .ttl = rec->ttl, .wid = rec->wid,
                    .has_meta = rec->meta != NULL};
    memcpy(r->digest, rec->digest, sizeof r->digest);
    if (rec->meta != NULL) {
        r->meta = *rec->meta;
        r->meta.md = NULL; /* the scan's is not ours to keep (and is NULL) */
    }
    if (!copy_key(&r->key, rec->key, s->chunk_keys))
        s->nomem = true;
    else
        s->n++;
}

static bool
sink_row(void *udata, const lmca_scan_rec_t *rec)
{
    scan_sink *s = udata;
    bool more;

    pthread_mutex_lock(&s->lock);
    if (!s->nomem && s->n < s->limit)
        take_row(s, rec);
    more = !s->nomem && s->n < s->limit;
    pthread_mutex_unlock(&s->lock);
    return more;
}

/* Row i as a dict; records mode (not chunk keys) says each row's kind. */
static PyObject *
row_dict(const void *ctx, size_t i)
{
    const scan_sink *s = ctx;
    const scan_row *r = &s->rows[i];
    PyObject *d = r->has_meta ? ext_meta_dict(&r->meta) : PyDict_New();

    if (d != NULL &&
        (ext_dict_take(d, "digest", PyBytes_FromStringAndSize((const char *)r->digest, 20)) < 0 ||
         ext_dict_take(d, "key", r->key ? text(r->key) : Py_NewRef(Py_None)) < 0 ||
         ext_dict_take(d, "ttl", ttl_obj(r->ttl)) < 0 ||
         ext_dict_take(d, "wid", PyLong_FromUnsignedLongLong(r->wid)) < 0 ||
         (!s->chunk_keys &&
          ext_dict_take(d, "kind", PyUnicode_FromString(kind_name((lmca_rec_kind)r->kind))) < 0)))
        Py_CLEAR(d);
    return d;
}

/* limit=None: no limit; else a count >= 0. -1 with an error set. */
static int
parse_limit(Connector *self, PyObject *obj, size_t *limit)
{
    Py_ssize_t n;

    *limit = SIZE_MAX;
    if (obj == Py_None)
        return 0;
    if ((n = PyLong_AsSsize_t(obj)) == -1 && PyErr_Occurred())
        return -1;
    if (n < 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "scan: limit=%zd; it must be None or >= 0", n);
        ext_raise(ext_state_of_connector(self), LMCA_EINVAL, 0, msg);
        return -1;
    }
    *limit = (size_t)n;
    return 0;
}

PyObject *
ext_scan(Connector *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"records", "limit", NULL};
    PyObject *limit = Py_None, *out = NULL;
    int records = 0, rc = LMCA_OK;
    scan_sink s = {.rows = NULL};
    lmca_err_t err = {0};
    bool ok;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$pO:scan", kwlist, &records, &limit) ||
        parse_limit(self, limit, &s.limit) < 0 || ext_check_open(self) < 0)
        return NULL;
    if (s.limit == 0)
        return PyList_New(0);
    s.chunk_keys = !records;
    pthread_mutex_init(&s.lock, NULL);
    EXT_BLOCKING(self, ok,
                 rc = lmca_scan(self->h, records ? LMCA_SCAN_RECORDS : LMCA_SCAN_META, sink_row,
                                &s, &err));
    if (ok && !raised(self, rc, s.nomem, &err))
        out = list_of(s.n, row_dict, &s);
    for (size_t i = 0; i < s.n; i++)
        free(s.rows[i].key);
    free(s.rows);
    pthread_mutex_destroy(&s.lock);
    return out;
}

/* ---------------------------------------------------------------------------
 * sweep() -> [dict], remove_record(digest) -> bool
 */

/* The sweep reports on the calling thread after its scan, but with the GIL
   released all the same: copies, built after. */
typedef struct {
    lmca_sweep_rec_t *recs;
    size_t n, cap;
    bool nomem;
} sweep_sink;

static bool
sink_swept(void *udata, const lmca_sweep_rec_t *rec)
{
    sweep_sink *s = udata;
    lmca_sweep_rec_t *recs = grow(s->recs, &s->cap, s->n, sizeof *recs);

    if (recs == NULL) {
        s->nomem = true;
        return false;
    }
    s->recs = recs;
    s->recs[s->n++] = *rec;
    return true;
}

static const char *
reason_name(lmca_sweep_reason why)
{
    return why == LMCA_SWEEP_ORPHAN_SEGMENT ? "orphan_segment"
           : why == LMCA_SWEEP_BROKEN_META  ? "broken_meta"
                                            : "corrupt";
}

static PyObject *
swept_dict(const void *ctx, size_t i)
{
    const lmca_sweep_rec_t *r = &((const sweep_sink *)ctx)->recs[i];
    return Py_BuildValue("{s:s,s:s,s:y#,s:K,s:N,s:I,s:I}", "reason", reason_name(r->reason),
                         "kind", kind_name(r->kind), "digest", (const char *)r->digest,
                         (Py_ssize_t)20, "wid", (unsigned long long)r->wid, "ttl",
                         ttl_obj(r->ttl), "nseg", r->nseg, "found", r->found);
}

PyObject *
ext_sweep(Connector *self, PyObject *Py_UNUSED(ignored))
{
    sweep_sink s = {.recs = NULL};
    lmca_err_t err = {0};
    PyObject *out = NULL;
    int rc = LMCA_OK;
    bool ok;

    EXT_BLOCKING(self, ok, rc = lmca_sweep(self->h, sink_swept, &s, &err));
    if (ok && !raised(self, rc, s.nomem, &err))
        out = list_of(s.n, swept_dict, &s);
    free(s.recs);
    return out;
}

PyObject *
ext_remove_record(Connector *self, PyObject *arg)
{
    uint8_t digest[20];
    lmca_err_t err = {0};
    Py_buffer view;
    int rc = LMCA_OK;
    bool ok;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len != (Py_ssize_t)sizeof digest) {
        char msg[96];
        snprintf(msg, sizeof msg, "remove_record: a digest is 20 bytes, got %zd", view.len);
        PyBuffer_Release(&view);
        return ext_raise(ext_state_of_connector(self), LMCA_EINVAL, 0, msg);
    }
    memcpy(digest, view.buf, sizeof digest);
    PyBuffer_Release(&view);
    EXT_BLOCKING(self, ok, rc = lmca_remove_record(self->h, digest, &err));
    if (!ok)
        return NULL;
    if (rc < 0)
        return ext_raise_err(ext_state_of_connector(self), &err);
    return PyBool_FromLong(rc == LMCA_OK);
}

/* ---------------------------------------------------------------------------
 * inspect(key) -> dict | None
 */

static PyObject *
segment_state(const void *ctx, size_t i)
{
    static const char *const names[] = {"ok", "missing", "other_write", "corrupt"};
    return PyUnicode_FromString(names[((const lmca_inspect_t *)ctx)->segs[i] & 3]);
}

static PyObject *
inspect_dict(const lmca_inspect_t *in)
{
    static const char *const crc[] = {"absent", "ok", "mismatch", "unchecked"};
    size_t nseg = in->segs ? in->meta.nseg : 0; /* a one-record chunk has none */
    PyObject *d = ext_meta_dict(&in->meta);

    if (d != NULL && (ext_dict_take(d, "md", ext_md_bytes(&in->meta)) < 0 ||
                      ext_dict_take(d, "ttl", ttl_obj(in->meta.ttl)) < 0 ||
                      ext_dict_take(d, "segments", list_of(nseg, segment_state, in)) < 0 ||
                      ext_dict_take(d, "crc", PyUnicode_FromString(crc[in->crc & 3])) < 0))
        Py_CLEAR(d);
    return d;
}

PyObject *
ext_inspect(Connector *self, PyObject *arg)
{
    ext_state *st = ext_state_of_connector(self);
    const char *key = ext_key_text(st, arg, -1);
    lmca_inspect_t in = {.segs = NULL};
    lmca_err_t err = {0};
    PyObject *out;
    int rc = LMCA_OK;
    bool ok;

    if (key == NULL)
        return NULL;
    EXT_BLOCKING(self, ok, rc = lmca_inspect(self->h, key, &in, &err));
    if (!ok)
        return NULL;
    out = rc == LMCA_OK     ? inspect_dict(&in)
          : rc == LMCA_MISS ? Py_NewRef(Py_None)
                            : ext_raise_err(st, &err);
    lmca_inspect_clear(&in);
    return out;
}
