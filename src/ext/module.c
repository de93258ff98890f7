/*
 * module.c - lmcache_aerospike._native: multi-phase init and the module's own
 * functions. Its state and exception tree are errors.c's; its types,
 * connector.c's and pending.c's.
 */
#include "connector.h"
#include "pending.h"

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
    if (ext_add_errors(m, st) < 0 || add_constants(m) < 0)
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

/* plan_chunk(nbytes, *, max_record_size=8 MiB, **settings): how a chunk of
   nbytes is split on a namespace whose max-record-size is that, with these
   settings (lmca_limits_resolve, lmca_plan): what `size` plans with, offline. */
static PyObject *
plan_chunk(PyObject *module, PyObject *args, PyObject *kwargs)
{
    ext_state *st = ext_state_of_module(module);
    unsigned long long nbytes, cap = 8ull << 20;
    lmca_config_t cfg;
    lmca_server_info_t srv;
    lmca_limits_t limits;
    lmca_plan_t plan;
    lmca_err_t err = {0};
    unsigned workers = 8;
    PyObject *settings, *value, *keep;
    char info[96];
    int rc;

    if (!PyArg_ParseTuple(args, "K:plan_chunk", &nbytes))
        return NULL;
    if ((settings = kwargs ? PyDict_Copy(kwargs) : PyDict_New()) == NULL)
        return NULL;
    if ((value = PyDict_GetItemString(settings, "max_record_size")) != NULL) {
        cap = PyLong_AsUnsignedLongLong(value);
        if (PyErr_Occurred() || PyDict_DelItemString(settings, "max_record_size") < 0) {
            Py_DECREF(settings);
            return NULL;
        }
    }
    if ((keep = PyList_New(0)) == NULL) {
        Py_DECREF(settings);
        return NULL;
    }
    lmca_config_init(&cfg);
    rc = ext_apply_settings(st, settings, &cfg, &workers, keep);
    Py_DECREF(settings);
    if (cfg.hosts == NULL || cfg.hosts[0] == '\0')
        cfg.hosts = "localhost:3000"; /* validated, never contacted */
    /* A namespace as the recipes set it up: the cap, and NSUP on for TTLs. */
    snprintf(info, sizeof info, "max-record-size=%llu;nsup-period=1", cap);
    if (rc == 0 && (lmca_server_info_parse(info, &srv, &err) != LMCA_OK ||
                    lmca_limits_resolve(&srv, &cfg, &limits, &err) != LMCA_OK ||
                    lmca_plan(&limits, nbytes, &plan, &err) != LMCA_OK)) {
        ext_raise_err(st, &err);
        rc = -1;
    }
    Py_DECREF(keep);
    if (rc < 0)
        return NULL;
    return Py_BuildValue("(IKK)", plan.nseg, (unsigned long long)plan.seg_b,
                         (unsigned long long)plan.last_b);
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
    {"plan_chunk", (PyCFunction)(void (*)(void))plan_chunk, METH_VARARGS | METH_KEYWORDS,
     "plan_chunk(nbytes, *, max_record_size=8388608, **settings) -> (nseg, seg_b, last_b): "
     "how a chunk of nbytes is split on a namespace with that max-record-size; offline."},
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
