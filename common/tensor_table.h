/* The tensor table on the wire and on disk: a ps_model_spec as the
 * TensorTable message (proto/shardps.proto) that a worker's HELLO carries and
 * a server checkpoint stores, the checks a server makes before it adopts a
 * table someone else sent (count, names, shapes, total bytes, initialisation
 * parameters), and the comparison that names the first difference between two
 * tables.
 *
 * The spec stays the one description (common/model_spec.h); this module only
 * translates it, so every process computes the same fingerprint and the same
 * initial values from what it received. */
#ifndef PS_TENSOR_TABLE_H
#define PS_TENSOR_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"
#include "shardps.pb-c.h"

/* A TensorTable message pointing into its own storage and at the names of
 * the spec it was made from: valid while that spec and this struct live and
 * stay in place. Nothing inside needs freeing. */
typedef struct {
    Shardps__TensorTable msg;
    Shardps__TensorDecl decls[PS_MAX_TENSORS];
    Shardps__TensorDecl *decl_ptrs[PS_MAX_TENSORS];
    uint32_t dims[PS_MAX_TENSORS][PS_MAX_DIMS];
} ps_tensor_table_wire;

/* Fills w from spec (borrowed: w->msg points at spec's tensor names). */
void ps_tensor_table_to_wire(const ps_model_spec *spec, ps_tensor_table_wire *w);

/* Builds spec from a table someone sent: at most PS_MAX_TENSORS tensors,
 * names of 1-31 characters from [A-Za-z0-9._-] and unique, 1..PS_MAX_DIMS
 * dimensions each >= 1, fewer than 2^31 elements per tensor, fans >= 1 and
 * below 2^31, a known init kind, and at most max_bytes of float32 values in
 * all (0: no limit). The spec has no MLP view (n_layers 0). Returns 0, or
 * -PS_EPROTO / -E2BIG with the reason in why. */
int ps_tensor_table_from_wire(const Shardps__TensorTable *t, size_t max_bytes, ps_model_spec *spec,
                              char *why, size_t why_len);

/* Unpacks a packed TensorTable (what a checkpoint stores) once its string
 * fields are known to hold no NUL byte (pb_strings.h: protobuf-c would cut a
 * name there). Returns the message (free it with
 * shardps__tensor_table__free_unpacked) or NULL with the reason in why.
 * Its contents are still to be checked with ps_tensor_table_from_wire. */
Shardps__TensorTable *ps_tensor_table_unpack(const uint8_t *buf, size_t len, char *why,
                                             size_t why_len);

/* Compares two tables (tensor order, names, shapes, initialisation, seed).
 * Returns 0 when they are equal, else 1 with the first difference written
 * into msg as "tensor fc1.weight: 256x784 from the worker, 128x784 on this
 * server" (a_side, b_side name where a and b came from). Pure. */
int ps_tensor_table_diff(const ps_model_spec *a, const ps_model_spec *b, const char *a_side,
                         const char *b_side, char *msg, size_t len);

/* Writes "256x784" into buf; returns buf. */
const char *ps_tensor_table_shape_text(const ps_tensor_spec *t, char *buf, size_t len);

#endif
