/*
 * xenc.h -- a BERT cross-encoder (Hugging Face BertForSequenceClassification, e.g. the ms-marco
 * MiniLM cross-encoders) as a library: part of `sg_e5`, on the same BERT core as the e5 encoder
 * (e5.h). It scores (query, passage) pairs as sentence-transformers' CrossEncoder.predict does:
 *
 *   tokens   `[CLS] query [SEP] passage [SEP]`, token types 0 then 1, uncased WordPiece exactly as
 *            BertTokenizer, truncation "longest_first" to max_length (SG_XENC_TRUNC_FAST, the
 *            default, is the `tokenizers` library's, which CrossEncoder's AutoTokenizer loads;
 *            SG_XENC_TRUNC_SLOW is the pure-Python BertTokenizer's; they differ only when both
 *            segments are cut and max_length - 3 is odd: wordpiece.h);
 *   model    BertModel (word + token type + position embeddings, the layers) and its pooler
 *            tanh(dense(h[CLS])), then `classifier` (a linear layer to num_labels logits);
 *   score    the activation CrossEncoder applies: config.json's
 *            `sentence_transformers.activation_fn` or `sbert_ce_default_activation_function`
 *            (the ms-marco cross-encoders name torch.nn.modules.linear.Identity: the score is
 *            the raw logit), else Sigmoid for one label and Identity for more. With more than one
 *            label the score is the softmax over the (activated) logits at `score_label` (default
 *            1, the "relevant" class of two-label rerankers): CrossEncoder.predict(pairs,
 *            apply_softmax=True)[:, score_label].
 *
 * docs/rerank.md has the details and the figures.
 *
 * Thread-safety: configure a model (the sg_xenc_set_* calls) before sharing it; a configured model
 * is read-only and may be shared by any number of threads, each scoring with its own workspace.
 */
#ifndef SG_XENC_H
#define SG_XENC_H

#include "e5.h"
#include "sg_par.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_xenc_model sg_xenc_model;
typedef struct sg_xenc_workspace sg_xenc_workspace;

/**
 * Loads the Hugging Face folder `dir`: config.json (a BERT with `architectures`
 * *ForSequenceClassification when named; num_labels = the size of `id2label`, else `num_labels`,
 * else 2, as transformers' PretrainedConfig; `type_vocab_size` >= 2), vocab.txt, model.safetensors
 * (`bert.` + BertModel's tensors with the pooler, `classifier.weight` [num_labels, hidden] and
 * `classifier.bias`; F32, F16 or BF16) and, when present, tokenizer_config.json (an uncased
 * tokenizer: `do_lower_case` true; its `model_max_length`). On failure returns -1 with a message
 * naming the file, key or tensor in `err`.
 */
int sg_xenc_load(const char *dir, sg_xenc_model **out, char *err, size_t err_size);
void sg_xenc_free(sg_xenc_model *m);

/** The number of logits per pair (config.json). */
int sg_xenc_num_labels(const sg_xenc_model *m);
/**
 * The model's own default max_length: tokenizer_config.json's `model_max_length` (what
 * CrossEncoder uses when given none; 512 for the ms-marco cross-encoders) capped to
 * `max_position_embeddings`, or `max_position_embeddings` without it.
 */
uint32_t sg_xenc_default_max_length(const sg_xenc_model *m);
/** `max_len` capped to the model's max_position_embeddings. */
uint32_t sg_xenc_max_length(const sg_xenc_model *m, uint32_t max_len);
/**
 * A short identity of the model files and the scoring settings (activation, score label,
 * truncation rule, precision), for cache keys. It does not cover max_length. Valid until the next
 * sg_xenc_set_* call or sg_xenc_free.
 */
const char *sg_xenc_identity(const sg_xenc_model *m);

enum { SG_XENC_IDENTITY = 0, SG_XENC_SIGMOID = 1, SG_XENC_TANH = 2 };
/** The activation applied to the logits for sg_xenc_score (from config.json, see the top). */
int sg_xenc_activation(const sg_xenc_model *m);
/** Overrides it (e.g. SG_XENC_IDENTITY for raw logits). Returns 0, or -1 for an unknown value. */
int sg_xenc_set_activation(sg_xenc_model *m, int activation);
/** With more than one label: the label whose softmax probability is the score (default 1). */
int sg_xenc_score_label(const sg_xenc_model *m);
/** Returns 0, or -1 when `label` is not in [0, num_labels). */
int sg_xenc_set_score_label(sg_xenc_model *m, int label);

enum { SG_XENC_TRUNC_FAST = 0, SG_XENC_TRUNC_SLOW = 1 };
int sg_xenc_truncation(const sg_xenc_model *m);
/** Returns 0, or -1 for an unknown rule. */
int sg_xenc_set_truncation(sg_xenc_model *m, int rule);
/** The layers in bfloat16 through oneDNN, as sg_e5_set_precision (SG_E5_FP32 / SG_E5_BF16). */
int sg_xenc_set_precision(sg_xenc_model *m, int precision, char *err, size_t err_size);
/** The float32 products through oneDNN, as sg_e5_use_onednn. */
int sg_xenc_use_onednn(sg_xenc_model *m, char *err, size_t err_size);

/**
 * Token ids and types of the pair (`query`, `passage`) as the model sees it, for max_length
 * `max_len` (capped to the model's positions; at least 3). Writes at most that many entries to
 * each of `ids` and `types` (may be NULL); returns the count, or -1.
 */
int sg_xenc_tokenize(const sg_xenc_model *m, const char *query, size_t qlen, const char *passage, size_t plen, uint32_t max_len,
                     int32_t *ids, uint8_t *types);

sg_xenc_workspace *sg_xenc_workspace_new(const sg_xenc_model *m);
void sg_xenc_workspace_free(sg_xenc_workspace *w);
/**
 * Lets the next calls on `w` split each layer's work over `par`'s threads (NULL: this thread
 * only), as sg_e5_workspace_set_par; the scores agree to float rounding.
 */
void sg_xenc_workspace_set_par(sg_xenc_workspace *w, sg_par_t *par);

/**
 * Scores the `n` pairs (`query`, passages[i]) with max_length `max_len` (capped to the model's
 * positions; at least 3): one score per pair into `scores`, as described at the top. `qlen` and
 * plens[i] are byte lengths (any bytes; invalid UTF-8 counts as U+FFFD); `plens` NULL means
 * NUL-terminated passages. The pairs run as one packed batch (in passes of a bounded number of
 * tokens); a pair's score does not depend on the others in the call. Returns 0, or -1 with `err`
 * set (max_len < 3, the workspace of another model, out of memory).
 */
int sg_xenc_score(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
                  const size_t *plens, size_t n, uint32_t max_len, float *scores, char *err, size_t err_size);
/** As sg_xenc_score, but the raw logits: n * num_labels floats, pair by pair, no activation. */
int sg_xenc_logits(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
                   const size_t *plens, size_t n, uint32_t max_len, float *logits, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
