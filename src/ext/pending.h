/*
 * pending.h - the Pending type (pending.c): a STAT's chunk waiting for its
 * destination. The connector makes them and hands them to a FILL.
 */
#ifndef LMCA_EXT_PENDING_H
#define LMCA_EXT_PENDING_H

#include <stdbool.h>

#include "ext.h"

typedef struct ext_pending ext_pending;

/* A new Pending that takes over what `g` holds (g's held and md become NULL). */
PyObject *ext_pending_new(ext_state *st, lmca_get_t *g);

bool ext_pending_check(ext_state *st, PyObject *obj);

/* Its get, or NULL once it was handed to a FILL. */
const lmca_get_t *ext_pending_get(ext_pending *p);

/* Marks it handed to an accepted FILL, which owns what its get held now. */
void ext_pending_consume(ext_pending *p);

extern PyType_Spec ext_pending_spec;

#endif /* LMCA_EXT_PENDING_H */
