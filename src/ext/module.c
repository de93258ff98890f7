/*
 * module.c - lmcache_aerospike._native: multi-phase init, module state, and the
 * exception tree generated from the engine's status table.
 */
#include "connector.h"
#include "pending.h"

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
     "The namespace is at stop-writes: free space or raise its limits; retrying will not help."},
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

static int
add_errors(PyObject *m, ext_state *st)
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

static int
add_constants(PyObject *m)
{
#define LMCA__CONST(name, value, text)                           \
    if (PyModule_AddIntConstant(m, "STATUS_" #name, value) < 0) \
        return -1;
    LMCA_STATUS_MAP(LMCA__CONST)
#undef LMCA__CONST
    if (PyModule_AddStringConstant(m, "__version__", LMCA_VERSION) < 0 ||
        PyModule_AddStringConstant(m, "aerospike_client_version", lmca_aerospike_version()) < 0)
        return -1;
    return 0;
}

static int
module_exec(PyObject *m)
{
    ext_state *st = ext_state_of_module(m);
    st->connector_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &ext_connector_spec, NULL);
    if (st->connector_type == NULL ||
        PyModule_AddObjectRef(m, "Connector", (PyObject *)st->connector_type) < 0)
        return -1;
    st->pending_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &ext_pending_spec, NULL);
    if (st->pending_type == NULL ||
        PyModule_AddObjectRef(m, "Pending", (PyObject *)st->pending_type) < 0)
        return -1;
    if (add_errors(m, st) < 0 || add_constants(m) < 0)
        return -1;
    return 0;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    ext_state *st = ext_state_of_module(m);
    Py_VISIT(st->connector_type);
    Py_VISIT(st->pending_type);
    Py_VISIT(st->error);
    for (int i = 0; i < LMCA_N_STATUSES; i++)
        Py_VISIT(st->errors[i]);
    return 0;
}

static int
module_clear(PyObject *m)
{
    ext_state *st = ext_state_of_module(m);
    Py_CLEAR(st->connector_type);
    Py_CLEAR(st->pending_type);
    Py_CLEAR(st->error);
    for (int i = 0; i < LMCA_N_STATUSES; i++)
        Py_CLEAR(st->errors[i]);
    return 0;
}

static void
module_free(void *m)
{
    module_clear((PyObject *)m);
}

/* check_settings(**settings): what Connector() checks before it connects. */
static PyObject *
check_settings(PyObject *module, PyObject *args, PyObject *kwargs)
{
    ext_state *st = ext_state_of_module(module);
    lmca_config_t cfg;
    lmca_err_t err = {0};
    unsigned workers = 8;
    PyObject *keep;
    int rc;

    if (PyTuple_GET_SIZE(args) > 0) {
        PyErr_SetString(PyExc_TypeError, "check_settings() takes keyword arguments only");
        return NULL;
    }
    if ((keep = PyList_New(0)) == NULL)
        return NULL;
    lmca_config_init(&cfg);
    rc = ext_apply_settings(st, kwargs, &cfg, &workers, keep);
    if (rc == 0 && lmca_config_validate(&cfg, &err) != LMCA_OK) {
        ext_raise_err(st, &err);
        rc = -1;
    }
    Py_DECREF(keep);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* error_from(text) -> Error: the typed exception of a completion's error text
   ("ETIMEOUT: message"), so that glue can raise what a blocking call would. */
static PyObject *
error_from(PyObject *module, PyObject *arg)
{
    ext_state *st = ext_state_of_module(module);
    const char *text = PyUnicode_AsUTF8(arg), *colon;
    int status = LMCA_EUNKNOWN;

    if (text == NULL)
        return NULL;
    colon = strstr(text, ": ");
#define LMCA__MATCH(name, value, txt)                                                       \
    if (colon && (size_t)(colon - text) == strlen(#name) && strncmp(text, #name, strlen(#name)) == 0) \
        status = value;
    LMCA_STATUS_MAP(LMCA__MATCH)
#undef LMCA__MATCH
    ext_raise(st, status, 0, colon && status != LMCA_EUNKNOWN ? colon + 2 : text);
    ext_saved_error e = ext_error_save();
#if PY_VERSION_HEX >= 0x030C0000
    return e.exc;
#else
    PyErr_NormalizeException(&e.type, &e.value, &e.tb);
    Py_XDECREF(e.type);
    Py_XDECREF(e.tb);
    return e.value;
#endif
}

static PyMethodDef module_methods[] = {
    {"error_from", (PyCFunction)error_from, METH_O,
     "error_from(text) -> Error: the typed exception for a completion's error text "
     "(\"ETIMEOUT: ...\"), with .status and .name set."},
    {"check_settings", (PyCFunction)(void (*)(void))check_settings, METH_VARARGS | METH_KEYWORDS,
     "check_settings(**settings): raise ConfigError naming the first bad setting, as "
     "Connector() would, without connecting."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "lmcache_aerospike._native",
    .m_doc = "The lmcache-aerospike C engine: an Aerospike KV-chunk store for LMCache.",
    .m_size = sizeof(ext_state),
    .m_slots = module_slots,
    .m_methods = module_methods,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&module_def);
}
