/*
 * fast.h - the payload data path: single-record puts and gets that never copy
 * or allocate a payload on the client side (fast.c).
 *
 * These are drop-in equivalents of aerospike_key_put and aerospike_key_select
 * for the records the engine writes and reads, called by wire.c only. Like the
 * client's calls, they return an as_status and fill `err`; wire.c maps both.
 * Thread-safe as the client is: any number of threads on one aerospike.
 */
#ifndef LMCA_FAST_H
#define LMCA_FAST_H

#include <aerospike/aerospike.h>
#include <aerospike/as_policy.h>

#include "record.h"

/*
 * Replaces `key` with `bins` (TTL as in as_record.ttl). The largest blob bin is
 * sent from the caller's buffer after the message header, in one sendmsg where
 * the socket takes it; every other bin is serialized into the header.
 * @return AEROSPIKE_OK, or the server's or the client's error (err says which).
 */
as_status lmca__fast_put(aerospike *as, as_error *err, const as_policy_write *policy,
                         as_key *key, const lmca__bin *bins, unsigned n, uint32_t ttl);

/*
 * Reads `key`'s bins named in `names` (NULL-terminated; NULL = all) with the
 * contract of lmca__wire_read: the bin called `payload` goes straight from the
 * socket into r->dst (or a new buffer with r->alloc) when it is a blob that
 * fits, every other bin to r->cb. r->found, blob, len, ttl and nomem are set;
 * r->result is left to the caller.
 * @return AEROSPIKE_OK, AEROSPIKE_ERR_RECORD_NOT_FOUND, or an error. A response
 *   that does not parse is AEROSPIKE_ERR_CLIENT ("malformed response ...") and
 *   its connection is closed, never reused.
 */
as_status lmca__fast_select(aerospike *as, as_error *err, const as_policy_read *policy,
                            as_key *key, const char *const *names, const char *payload,
                            lmca__read *r);

#endif /* LMCA_FAST_H */
