/*
 * ext.h - the CPython extension lmcache_aerospike._native: the module state and
 * the exceptions (errors.c), shared by the module (module.c) and its types
 * (connector.c, pending.c).
 */
#ifndef LMCA_EXT_H
#define LMCA_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "lmca.h"
#include "lmca_async.h"

/* Number of statuses in LMCA_STATUS_MAP, so the state can hold one exception
   class per status. */
#define LMCA__COUNT_ONE(name, value, text) +1
enum { LMCA_N_STATUSES = 0 LMCA_STATUS_MAP(LMCA__COUNT_ONE) };
#undef LMCA__COUNT_ONE

typedef struct {
    PyTypeObject *connector_type;
    PyTypeObject *pending_type;
    PyObject *error;                       /* lmcache_aerospike._native.Error */
    PyObject *errors[LMCA_N_STATUSES];     /* one subclass per status, by index */
} ext_state;

ext_state *ext_state_of_module(PyObject *module);
ext_state *ext_state_of_type(PyTypeObject *type);

/* Raises the exception of `status` with `msg` (or the status text), carrying
   .status, .name and .as_code. Returns NULL for `return ext_raise(...)`. */
PyObject *ext_raise(ext_state *st, int status, int as_code, const char *msg);
PyObject *ext_raise_err(ext_state *st, const lmca_err_t *err);

/* Creates Error and one subclass per status into the module and `st`. */
int ext_add_errors(PyObject *m, ext_state *st);

/* The connector type's spec, created in module exec. */
extern PyType_Spec ext_connector_spec;

#endif /* LMCA_EXT_H */
