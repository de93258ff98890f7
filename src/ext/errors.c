/*
 * errors.c - the module state of lmcache_aerospike._native and the exception
 * tree generated from the engine's status table: what every part of the
 * extension raises, below all of them.
 */
#include <stdio.h>

#include "ext.h"

/* Python class names per status: the X-macro name, made readable. */
static const struct {
    int status;
    const char *class_name;
    const char *doc;
} error_classes[] = {
    {LMCA_EINVAL, "InvalidArgumentError", "An argument the engine refuses."},
    {LMCA_ECONFIG, "ConfigError", "A bad setting; the message names the key."},
    {LMCA_ETOO_BIG, "RecordTooBigError", "The server refused a record as too big."},
    {LMCA_ETIMEOUT, "TimeoutError", "The operation timed out."},
    {LMCA_ECONNECTION, "ConnectionError", "The cluster cannot be reached."},
    {LMCA_EBUSY, "BusyError", "Key busy, device overload or no free connection: retry later."},
    {LMCA_ETTL, "TTLConfigError", "TTL refused: the namespace has nsup-period 0."},
    {LMCA_ENAMESPACE, "NamespaceError", "The namespace probe failed."},
    {LMCA_ESERVER_LIMIT, "ServerLimitError", "The record-size cap is missing or out of range."},
    {LMCA_ENOMEM, "OutOfMemoryError", "The engine ran out of memory."},
    {LMCA_EINTERNAL, "InternalError", "A bug in the engine or the client."},
    {LMCA_EUNKNOWN, "UnknownError", "An unexpected Aerospike error; see .as_code."},
    {LMCA_ECANCELED, "CanceledError", "The connector was closed."},
    {LMCA_EFULL, "ServerFullError",
     "The namespace stayed at stop-writes for backpressure_ms: the store was dropped."},
};

/* Index of a status in the state's errors[], in X-macro order. */
static int
status_index(int status)
{
    int i = 0;
#define LMCA__INDEX(name, value, text) \
    if (status == value)               \
        return i;                      \
    i++;
    LMCA_STATUS_MAP(LMCA__INDEX)
#undef LMCA__INDEX
    return -1;
}

/* Sets an attribute to a new reference, which it consumes. */
static int
set_attr(PyObject *obj, const char *name, PyObject *value)
{
    int rc = value ? PyObject_SetAttrString(obj, name, value) : -1;
    Py_XDECREF(value);
    return rc;
}

PyObject *
ext_raise(ext_state *st, int status, int as_code, const char *msg)
{
    int i = status_index(status);
    PyObject *type = i >= 0 && st->errors[i] ? st->errors[i] : st->error;
    PyObject *exc = PyObject_CallFunction(type, "s", msg && *msg ? msg : lmca_strerror(status));
    if (exc == NULL)
        return NULL;
    if (set_attr(exc, "status", PyLong_FromLong(status)) < 0 ||
        set_attr(exc, "name", PyUnicode_FromString(lmca_status_name(status))) < 0 ||
        set_attr(exc, "as_code", PyLong_FromLong(as_code)) < 0) {
        Py_DECREF(exc);
        return NULL;
    }
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *
ext_raise_err(ext_state *st, const lmca_err_t *err)
{
    return ext_raise(st, err->status, err->as_code, err->msg);
}

ext_state *
ext_state_of_module(PyObject *module)
{
    return PyModule_GetState(module);
}

ext_state *
ext_state_of_type(PyTypeObject *type)
{
    return PyType_GetModuleState(type);
}

/* Builtin bases that make the errors catchable the usual way too. */
static PyObject *
builtin_base(int status)
{
    switch (status) {
    case LMCA_EINVAL:
    case LMCA_ECONFIG:
        return PyExc_ValueError;
    case LMCA_ETIMEOUT:
        return PyExc_TimeoutError;
    case LMCA_ECONNECTION:
        return PyExc_ConnectionError;
    case LMCA_ENOMEM:
        return PyExc_MemoryError;
    default:
        return NULL;
    }
}

int
ext_add_errors(PyObject *m, ext_state *st)
{
    st->error = PyErr_NewExceptionWithDoc(
        "lmcache_aerospike._native.Error",
        "Base of every engine error: .status (int), .name (str), .as_code (int).", NULL, NULL);
    if (st->error == NULL || PyModule_AddObjectRef(m, "Error", st->error) < 0)
        return -1;
    for (size_t k = 0; k < sizeof error_classes / sizeof error_classes[0]; k++) {
        char qualname[96];
        PyObject *base = builtin_base(error_classes[k].status);
        PyObject *bases = base ? PyTuple_Pack(2, st->error, base) : PyTuple_Pack(1, st->error);
        int i = status_index(error_classes[k].status);
        if (bases == NULL)
            return -1;
        snprintf(qualname, sizeof qualname, "lmcache_aerospike._native.%s",
                 error_classes[k].class_name);
        st->errors[i] = PyErr_NewExceptionWithDoc(qualname, error_classes[k].doc, bases, NULL);
        Py_DECREF(bases);
        if (st->errors[i] == NULL ||
            PyModule_AddObjectRef(m, error_classes[k].class_name, st->errors[i]) < 0)
            return -1;
    }
    return 0;
}

