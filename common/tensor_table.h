/* The tensor table on the wire and on disk: a ps_model_spec as the
 * TensorTable message (proto/shardps.proto) that a TABLE frame carries as
 * its payload and a server checkpoint stores, the checks a process makes
 * before it adopts a table someone else sent (count, names, shapes, kinds,
 * dtypes, total bytes, initialisation parameters), and the comparison that
 * names the first difference between two tables.
 *
 * The spec stays the one description (common/model_spec.h); this module only
 * translates it, so every process computes the same digest and the same
 * initial values from what it received. */
#ifndef PS_TENSOR_TABLE_H
#define PS_TENSOR_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"
#include "shardps.pb-c.h"

/* The packed table's bytes at most (a TABLE payload, a checkpoint's table):
 * PS_MAX_TENSORS declarations with names of PS_MAX_NAME_BYTES take about
 * 1.3 MB. */
#define PS_TABLE_MAX_BYTES ((size_t)2 << 20)

/* A TensorTable message pointing into storage of its own (allocated to the
 * table's size) and at the names of the spec it was made from: valid while
 * that spec and this struct live and stay in place. */
typedef struct {
    Shardps__TensorTable msg;
    Shardps__TensorDecl *decls;       /* owned */
    Shardps__TensorDecl **decl_ptrs;  /* owned */
    uint32_t *dims;                   /* owned: PS_MAX_DIMS per tensor */
    Shardps__RowTableDecl *rows;      /* owned */
    Shardps__RowTableDecl **row_ptrs; /* owned */
} ps_tensor_table_wire;

/* Fills w from spec (borrowed: w->msg points at spec's tensor names).
 * Returns 0 or -ENOMEM (w then holds nothing). Free w with
 * ps_tensor_table_wire_free either way. */
int ps_tensor_table_to_wire(const ps_model_spec *spec, ps_tensor_table_wire *w);
void ps_tensor_table_wire_free(ps_tensor_table_wire *w);

/* spec as a packed TensorTable in *out (the caller frees it with free()),
 * *len bytes. Returns 0, -E2BIG (over PS_TABLE_MAX_BYTES, which a valid
 * table never is) or -ENOMEM. */
int ps_tensor_table_pack(const ps_model_spec *spec, uint8_t **out, size_t *len);

/* Builds spec from a table someone sent: 1 to PS_MAX_TENSORS tensors, names
 * that pass ps_model_spec_name_ok and are unique, 1..PS_MAX_DIMS
 * dimensions each >= 1, fewer than 2^31 elements per tensor, fans >= 1 and
 * below 2^31, a known init kind, kind and dtype in a combination a table
 * may hold (ps_model_spec_add), and at most max_bytes of values in all (0:
 * no limit); then up to PS_MAX_ROW_TABLES row tables, each as
 * ps_row_table_from_decl accepts it, with unique names. The spec has no MLP view (n_layers 0); it
 * is overwritten (free what it held first), and empty after a refusal. Returns 0, or -PS_EPROTO /
 * -E2BIG with the reason in why, or -ENOMEM. */
int ps_tensor_table_from_wire(const Shardps__TensorTable *t, size_t max_bytes, ps_model_spec *spec,
                              char *why, size_t why_len);

/* Unpacks a packed TensorTable (a TABLE payload, a checkpoint's table) once
 * its string fields are known to hold no NUL byte (pb_strings.h: protobuf-c
 * would cut a name there) and its size is within PS_TABLE_MAX_BYTES.
 * Returns the message (free it with shardps__tensor_table__free_unpacked) or
 * NULL with the reason in why. Its contents are still to be checked with
 * ps_tensor_table_from_wire. */
Shardps__TensorTable *ps_tensor_table_unpack(const uint8_t *buf, size_t len, char *why,
                                             size_t why_len);

/* ps_tensor_table_unpack, then ps_tensor_table_from_wire: a packed table
 * someone sent, checked, as spec. Returns 0 or a negative code with the
 * reason in why. */
int ps_tensor_table_decode(const uint8_t *buf, size_t len, size_t max_bytes, ps_model_spec *spec,
                           char *why, size_t why_len);

/* Compares two tables (tensor order, names, shapes, kinds, dtypes,
 * initialisation, seed, row tables: everything the digest covers). Returns 0 when they
 * are equal, else 1 with the first difference written into msg as "tensor
 * fc1.weight: 256x784 from the worker, 128x784 on this server" (a_side,
 * b_side name where a and b came from). Pure. */
int ps_tensor_table_diff(const ps_model_spec *a, const ps_model_spec *b, const char *a_side,
                         const char *b_side, char *msg, size_t len);

/* Writes "256x784" into buf; returns buf. */
const char *ps_tensor_table_shape_text(const ps_tensor_spec *t, char *buf, size_t len);

#endif
