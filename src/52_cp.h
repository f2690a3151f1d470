
/* ============================================================================================
 * >>cp
 * Context parallelism splits every sequence along its length over cp ranks. Under causal
 * attention a later token attends to more tokens, so cutting a sequence into cp contiguous
 * pieces would load the last rank most. The load-balanced split cuts it into 2*cp equal chunks
 * and gives rank r chunks r and 2*cp-1-r, an early cheap chunk with a late costly one:
 *
 *     cp = 2, 8 tokens:   chunks [0 1] [2 3] [4 5] [6 7]
 *                         rank 0 holds chunks 0 and 3: positions 0 1 6 7
 *                         rank 1 holds chunks 1 and 2: positions 2 3 4 5
 *
 *   BSHD  a padded batch, every row seq_len tokens (seq_len % (2*cp) == 0): each row split alike,
 *         as Megatron-LM's get_batch_on_this_cp_rank does.
 *   THD   packed sequences described by cu_seqlens_padded (every padded length % (2*cp) == 0):
 *         each sequence split on its own; rank r's local buffer holds its two chunks of sequence
 *         0, then its two of sequence 1, ..., so sequence i starts at cu_seqlens_padded[i] / cp
 *         locally. This is TransformerEngine's thd_get_partitioned_indices, position for position.
 *         Packed with 5 and 11 tokens padded to 8 and 12 (cu_seqlens_padded 0 8 20), cp = 2:
 *             rank 0: 0 1 6 7 | 8 9 10 17 18 19       (chunk size 2 in sequence 0, 3 in sequence 1)
 *             rank 1: 2 3 4 5 | 11 12 13 14 15 16
 *
 * Two int32 index maps per split, positions within one microbatch (what pipepar_cuda.cu's
 * gather kernels read):
 *   index  [total / cp]  index[j] = global position of rank r's local token j; the rank's input is
 *                        input[index[j]] for j = 0 .. total/cp - 1.
 *   source [total]       source[g] = r * (total / cp) + j for the rank r and local slot j holding
 *                        global position g; with every rank's output all-gathered rank by rank
 *                        into one [cp, total / cp] buffer, output[g] = gathered[source[g]]
 *                        restores the sequence order. The index maps of all ranks, concatenated,
 *                        form a permutation of 0 .. total-1 and source is its inverse.
 * ============================================================================================ */

/* BSHD: rank's local positions of one row of seq_len tokens. index has room for seq_len / cp. */
PIPEPAR_API pp_status pp_cp_bshd_indices(int32_t seq_len, int cp, int rank, int32_t *index, pp_error *err);
/* BSHD: the inverse for gathering outputs back. source has room for seq_len. */
PIPEPAR_API pp_status pp_cp_bshd_gather(int32_t seq_len, int cp, int32_t *source, pp_error *err);

/* THD: cu_seqlens_padded has num_seqs + 1 entries, from 0, nondecreasing, every difference a
 * multiple of 2*cp when cp > 1; total = cu_seqlens_padded[num_seqs]. index has room for
 * total / cp. (cp = 1 is the identity and takes any lengths.) */
PIPEPAR_API pp_status pp_cp_thd_indices(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int rank,
                                        int32_t *index, pp_error *err);
/* THD: the inverse for gathering outputs back. source has room for total. */
PIPEPAR_API pp_status pp_cp_thd_gather(const int32_t *cu_seqlens_padded, int num_seqs, int cp, int32_t *source,
                                       pp_error *err);
/* THD: the rank-local boundaries, cu_seqlens_padded[i] / cp (num_seqs + 1 entries). */
PIPEPAR_API pp_status pp_cp_thd_local_cu_seqlens(const int32_t *cu_seqlens_padded, int num_seqs, int cp,
                                                 int32_t *local, pp_error *err);

/* A microbatch of a pack plan, split with the plan's cp: pp_cp_thd_indices over the bin's
 * cu_seqlens_padded. index has room for plan->bin_padded_tokens[bin] / plan->cp. */
PIPEPAR_API pp_status pp_cp_plan_indices(const pp_pack_plan *plan, int bin, int cp_rank, int32_t *index,
                                         pp_error *err);
/* The rows a cp rank's tokens come from, in one step: rows[j] for j = 0 .. padded/cp - 1 is the
 * row of the caller's flat token tensor that rank cp_rank's local token j of microbatch `bin`
 * takes (pp_pack_plan_gather composed with pp_cp_plan_indices), -1 for padding. seq_offsets as
 * for pp_pack_plan_gather (NULL: the sequences back to back). One gather by these rows builds the
 * rank's input ids, labels or loss mask straight from the unpacked batch. */
PIPEPAR_API pp_status pp_cp_plan_rows(const pp_pack_plan *plan, int bin, int cp_rank, const int64_t *seq_offsets,
                                      int64_t *rows, pp_error *err);
