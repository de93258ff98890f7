/*
 * lmca_status.h - status codes and error details of the lmcache-aerospike engine.
 *
 * Every engine call returns an int status: LMCA_OK (0) on success, LMCA_MISS (1)
 * when the key holds no complete value (a miss is data, not an error), and a
 * negative LMCA_E* code on failure. Calls that can fail also take an optional
 * lmca_err_t* (may be NULL) that receives the status, the Aerospike result code
 * that caused it (if any) and a message naming the offending value.
 *
 * The codes follow the error matrix of the design (spec 4.7). They are generated
 * from one table, LMCA_STATUS_MAP, so the enum, lmca_status_name() and
 * lmca_strerror() can never disagree.
 */
#ifndef LMCA_STATUS_H
#define LMCA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LMCA_EXTERN __attribute__((visibility("default")))
#else
#define LMCA_EXTERN
#endif

/* X(NAME, value, description) */
#define LMCA_STATUS_MAP(X)                                                          \
    X(OK, 0, "success")                                                           \
    X(MISS, 1, "no complete value is stored under this key")                      \
    X(EINVAL, -1, "invalid argument")                                             \
    X(ECONFIG, -2, "invalid configuration value")                                 \
    X(ETOO_BIG, -3, "record too big for the namespace")                           \
    X(ETIMEOUT, -4, "operation timed out")                                        \
    X(ECONNECTION, -5, "cannot reach the Aerospike cluster")                      \
    X(EBUSY, -6, "server busy (key busy, device overload, no connection free)")   \
    X(ETTL, -7, "TTL refused: the namespace has nsup-period 0")                   \
    X(ENAMESPACE, -8, "namespace probe failed")                                   \
    X(ESERVER_LIMIT, -9, "server record-size limit is missing or out of range")   \
    X(ENOMEM, -10, "out of memory")                                               \
    X(EINTERNAL, -11, "internal error")                                           \
    X(EUNKNOWN, -12, "unexpected Aerospike error")                                \
    X(ECANCELED, -13, "canceled because the handle was closed")                  \
    X(EFULL, -14, "namespace full: the server is at stop-writes")

typedef enum lmca_status {
#define LMCA__STATUS_ENUM(name, value, text) LMCA_##name = value,
    LMCA_STATUS_MAP(LMCA__STATUS_ENUM)
#undef LMCA__STATUS_ENUM
} lmca_status;

/* Size of lmca_err_t.msg, including the terminating NUL. */
#define LMCA_ERRMSG_SIZE 320

/*
 * Error details of one call. Owned by the caller; use one per thread (or per
 * call). The engine writes it only when the call fails, so a struct that was
 * zeroed before the call still reads as LMCA_OK after a success or a miss.
 */
typedef struct lmca_err {
    int status;                  /* an lmca_status, same as the call's return */
    int as_code;                 /* Aerospike as_status behind it, or 0 */
    char msg[LMCA_ERRMSG_SIZE];  /* human-readable, names the offending value */
} lmca_err_t;

/* Log levels of lmca_log_cb. */
enum { LMCA_LOG_DEBUG = 10, LMCA_LOG_INFO = 20, LMCA_LOG_WARNING = 30 };

/*
 * Receives the engine's notices: the limits discovered at open (INFO), clamped
 * settings and corrupt records read as misses (WARNING). Called on the thread
 * that made the call (any thread, for a shared handle), never with a lock held;
 * `msg` is valid during the call only.
 */
typedef void (*lmca_log_cb)(void *udata, int level, const char *msg);

/* Name of a status ("ETOO_BIG"), or "UNKNOWN_STATUS". Static storage. */
LMCA_EXTERN const char *lmca_status_name(int status);

/* One-line description of a status. Static storage. */
LMCA_EXTERN const char *lmca_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif /* LMCA_STATUS_H */
