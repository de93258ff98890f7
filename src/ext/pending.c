/*
 * pending.c - the Pending type: a chunk whose metadata a STAT has read, waiting
 * for the caller to allocate its destination (from the md blob) and FILL it. It
 * owns what the engine's get holds: the md copy and, for a one-record chunk,
 * the payload, so that the chunk is read from the server once.
 */
#include "pending.h"

#include <structmember.h>

struct ext_pending {
    PyObject_HEAD
    lmca_get_t get; /* key unused: a FILL takes the keys it is given */
    bool consumed;  /* handed to a FILL, which owns what the get held */
};

PyObject *
ext_pending_new(ext_state *st, lmca_get_t *g)
{
    ext_pending *p = PyObject_New(ext_pending, st->pending_type);
    if (p == NULL)
        return NULL;
    p->get = *g;
    p->get.key = NULL;
    p->consumed = false;
    g->held = NULL; /* taken: the completion lets go */
    g->meta.md = NULL;
    return (PyObject *)p;
}

bool
ext_pending_check(ext_state *st, PyObject *obj)
{
    return Py_IS_TYPE(obj, st->pending_type);
}

const lmca_get_t *
ext_pending_get(ext_pending *p)
{
    return p->consumed ? NULL : &p->get;
}

void
ext_pending_consume(ext_pending *p)
{
    p->consumed = true;
    p->get.held = NULL; /* the FILL's now */
    p->get.meta.md = NULL;
}

static void
pending_dealloc(ext_pending *p)
{
    PyTypeObject *type = Py_TYPE(p);
    lmca_get_release(&p->get);
    PyObject_Free(p);
    Py_DECREF(type);
}

static PyObject *
pending_md(ext_pending *p, void *Py_UNUSED(closure))
{
    const lmca_meta_t *m = &p->get.meta;
    if (p->consumed || m->md == NULL)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)m->md, (Py_ssize_t)m->md_len);
}

static PyObject *
pending_crc32(ext_pending *p, void *Py_UNUSED(closure))
{
    if (!p->get.meta.has_crc32)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(p->get.meta.crc32);
}

#define META(field) offsetof(ext_pending, get) + offsetof(lmca_get_t, meta) + offsetof(lmca_meta_t, field)

static PyMemberDef pending_members[] = {
    {"nbytes", T_ULONGLONG, META(tot_b), READONLY, "Payload bytes: the buffer to FILL."},
    {"nseg", T_UINT, META(nseg), READONLY, "Records the payload spans."},
    {"pin", T_BOOL, META(pin), READONLY, "Stored never-expiring."},
    {"ttl", T_UINT, META(ttl), READONLY, "Seconds left; 4294967295 never expires."},
    {"created_at", T_LONGLONG, META(created_at), READONLY, "Epoch seconds of the put."},
    {"serde", T_STRING_INPLACE, META(serde), READONLY, "The serde tag, or ''."},
    {"ttl_class", T_STRING_INPLACE, META(ttl_class), READONLY, "The TTL class, or ''."},
    {"consumed", T_BOOL, offsetof(ext_pending, consumed), READONLY,
     "True once handed to submit_batch_fill."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef pending_getset[] = {
    {"md", (getter)pending_md, NULL, "The md blob (bytes), or None.", NULL},
    {"crc32", (getter)pending_crc32, NULL, "The payload's CRC-32, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pending_slots[] = {
    {Py_tp_dealloc, pending_dealloc},
    {Py_tp_members, pending_members},
    {Py_tp_getset, pending_getset},
    {Py_tp_doc, "A chunk whose metadata a STAT read: allocate nbytes (from md), then "
                "submit_batch_fill. Made by the connector only."},
    {0, NULL},
};

PyType_Spec ext_pending_spec = {
    .name = "lmcache_aerospike._native.Pending",
    .basicsize = sizeof(ext_pending),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = pending_slots,
};
