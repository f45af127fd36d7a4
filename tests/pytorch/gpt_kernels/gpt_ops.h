// The arithmetic of the training loop's kernels, one output item at a time, shared by the CUDA
// kernels (gpt_kernels.cu: one GPU thread per item, grid-stride) and their host
// implementations for the simulated driver (gpt_kernels_host.cc: one loop over all items), so
// both compute the same expressions. Every item is computed by one thread in a fixed order:
// results are deterministic (no atomics), as the bit-exact loss comparison needs.
//
// Layouts: row-major float32; activations [rows, features]; a linear layer's weight is
// [in, out] (y = x @ W + b); qkv is [B, T, 3C] with heads of size C / H inside each of q, k, v;
// attention probabilities are [B, H, T, T] (causal: entries j > i are 0).
#ifndef MEMVIRT_TESTS_PYTORCH_GPT_KERNELS_GPT_OPS_H_
#define MEMVIRT_TESTS_PYTORCH_GPT_KERNELS_GPT_OPS_H_

#include <math.h>

#ifdef __CUDACC__
#define GPT_HD __host__ __device__ inline
#else
#define GPT_HD inline
#endif

// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]; item = (b, i, j) of C.
GPT_HD void gemm_item(long item, int batch, int m, int n, int k, const float* a, long stride_a,
                      int lda, int trans_a, const float* b, long stride_b, int ldb, int trans_b,
                      float* c, long stride_c, int ldc, float alpha, float beta) {
  (void)batch;
  const long bi = item / ((long)m * n);
  const int i = (int)(item / n % m);
  const int j = (int)(item % n);
  const float* pa = a + bi * stride_a;
  const float* pb = b + bi * stride_b;
  float sum = 0.0f;
  for (int p = 0; p < k; ++p) {
    const float x = trans_a ? pa[(long)p * lda + i] : pa[(long)i * lda + p];
    const float y = trans_b ? pb[(long)j * ldb + p] : pb[(long)p * ldb + j];
    sum += x * y;
  }
  float* out = c + bi * stride_c + (long)i * ldc + j;
  *out = alpha * sum + (beta == 0.0f ? 0.0f : beta * *out);
}

// y[r, c] += bias[c]; item = element.
GPT_HD void add_bias_item(long item, int cols, float* y, const float* bias) {
  y[item] += bias[item % cols];
}

// db[c] = sum over rows of dy[r, c]; item = column.
GPT_HD void bias_grad_item(long item, int rows, int cols, const float* dy, float* db) {
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) sum += dy[(long)r * cols + item];
  db[item] = sum;
}

// out = a + b; item = element.
GPT_HD void add_item(long item, const float* a, const float* b, float* out) {
  out[item] = a[item] + b[item];
}

// out = value; item = element.
GPT_HD void fill_item(long item, float* out, float value) { out[item] = value; }

GPT_HD float gelu(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
GPT_HD float gelu_grad(float x) {
  const float u = 0.7978845608f * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 0.134145f * x * x);
}
// y = gelu(x); item = element.
GPT_HD void gelu_item(long item, const float* x, float* y) { y[item] = gelu(x[item]); }
// dx = dy * gelu'(x); item = element.
GPT_HD void gelu_grad_item(long item, const float* x, const float* dy, float* dx) {
  dx[item] = dy[item] * gelu_grad(x[item]);
}

// Layer norm of one row: y = (x - mean) * rstd * g + b, mean and rstd saved; item = row.
GPT_HD void layernorm_item(long item, int cols, const float* x, const float* g, const float* b,
                           float* y, float* mean, float* rstd) {
  const float* row = x + item * cols;
  float m = 0.0f;
  for (int c = 0; c < cols; ++c) m += row[c];
  m /= cols;
  float var = 0.0f;
  for (int c = 0; c < cols; ++c) var += (row[c] - m) * (row[c] - m);
  const float s = 1.0f / sqrtf(var / cols + 1e-5f);
  for (int c = 0; c < cols; ++c) y[item * cols + c] = (row[c] - m) * s * g[c] + b[c];
  mean[item] = m;
  rstd[item] = s;
}
// dx of one row; item = row.
GPT_HD void layernorm_grad_x_item(long item, int cols, const float* x, const float* g,
                                  const float* mean, const float* rstd, const float* dy,
                                  float* dx) {
  const float* row = x + item * cols;
  const float* drow = dy + item * cols;
  const float m = mean[item], s = rstd[item];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int c = 0; c < cols; ++c) {
    const float xhat = (row[c] - m) * s;
    const float dxhat = drow[c] * g[c];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  for (int c = 0; c < cols; ++c) {
    const float xhat = (row[c] - m) * s;
    const float dxhat = drow[c] * g[c];
    dx[item * cols + c] = s * (dxhat - (sum_dxhat + xhat * sum_dxhat_xhat) / cols);
  }
}
// dg[c], db[c] summed over rows; item = column.
GPT_HD void layernorm_grad_params_item(long item, int rows, int cols, const float* x,
                                       const float* mean, const float* rstd, const float* dy,
                                       float* dg, float* db) {
  float sg = 0.0f, sb = 0.0f;
  for (int r = 0; r < rows; ++r) {
    const float d = dy[(long)r * cols + item];
    sg += d * (x[(long)r * cols + item] - mean[r]) * rstd[r];
    sb += d;
  }
  dg[item] = sg;
  db[item] = sb;
}

// Causal self-attention of one query row (b, h, i): probabilities p[b, h, i, :] and the head's
// slice of out[b, i, :]; item = (b, h, i).
GPT_HD void attention_item(long item, int heads, int t_len, int channels, const float* qkv,
                           float* p, float* out) {
  const int hs = channels / heads;
  const int i = (int)(item % t_len);
  const int h = (int)(item / t_len % heads);
  const long bi = item / ((long)t_len * heads);
  const float scale = 1.0f / sqrtf((float)hs);
  const float* q = qkv + (bi * t_len + i) * 3 * channels + h * hs;
  float* prow = p + item * t_len;
  float maxv = -INFINITY;
  for (int j = 0; j <= i; ++j) {
    const float* kr = qkv + (bi * t_len + j) * 3 * channels + channels + h * hs;
    float s = 0.0f;
    for (int d = 0; d < hs; ++d) s += q[d] * kr[d];
    s *= scale;
    prow[j] = s;
    maxv = s > maxv ? s : maxv;
  }
  float sum = 0.0f;
  for (int j = 0; j <= i; ++j) {
    prow[j] = expf(prow[j] - maxv);
    sum += prow[j];
  }
  for (int j = 0; j < t_len; ++j) prow[j] = j <= i ? prow[j] / sum : 0.0f;
  float* o = out + (bi * t_len + i) * channels + h * hs;
  for (int d = 0; d < hs; ++d) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += prow[j] * qkv[(bi * t_len + j) * 3 * channels + 2 * channels + h * hs + d];
    o[d] = acc;
  }
}
// Backward of one query row: ds[b, h, i, :] (gradient of the pre-softmax scores) and dq;
// item = (b, h, i).
GPT_HD void attention_grad_q_item(long item, int heads, int t_len, int channels, const float* qkv,
                                  const float* p, const float* dout, float* ds, float* dqkv) {
  const int hs = channels / heads;
  const int i = (int)(item % t_len);
  const int h = (int)(item / t_len % heads);
  const long bi = item / ((long)t_len * heads);
  const float scale = 1.0f / sqrtf((float)hs);
  const float* prow = p + item * t_len;
  float* dsrow = ds + item * t_len;
  const float* dor = dout + (bi * t_len + i) * channels + h * hs;
  float dot = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float* vr = qkv + (bi * t_len + j) * 3 * channels + 2 * channels + h * hs;
    float dp = 0.0f;
    for (int d = 0; d < hs; ++d) dp += dor[d] * vr[d];
    dsrow[j] = dp;
    dot += prow[j] * dp;
  }
  for (int j = 0; j < t_len; ++j) dsrow[j] = j <= i ? prow[j] * (dsrow[j] - dot) : 0.0f;
  float* dq = dqkv + (bi * t_len + i) * 3 * channels + h * hs;
  for (int d = 0; d < hs; ++d) {
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += dsrow[j] * qkv[(bi * t_len + j) * 3 * channels + channels + h * hs + d];
    dq[d] = acc * scale;
  }
}
// dk and dv of one key row (b, h, j); item = (b, h, j).
GPT_HD void attention_grad_kv_item(long item, int heads, int t_len, int channels, const float* qkv,
                                   const float* p, const float* ds, const float* dout,
                                   float* dqkv) {
  const int hs = channels / heads;
  const int j = (int)(item % t_len);
  const int h = (int)(item / t_len % heads);
  const long bi = item / ((long)t_len * heads);
  const float scale = 1.0f / sqrtf((float)hs);
  const long row0 = (bi * heads + h) * (long)t_len;  // first query row of this (b, h)
  float* dk = dqkv + (bi * t_len + j) * 3 * channels + channels + h * hs;
  float* dv = dqkv + (bi * t_len + j) * 3 * channels + 2 * channels + h * hs;
  for (int d = 0; d < hs; ++d) {
    float ak = 0.0f, av = 0.0f;
    for (int i = j; i < t_len; ++i) {
      ak += ds[(row0 + i) * t_len + j] * qkv[(bi * t_len + i) * 3 * channels + h * hs + d];
      av += p[(row0 + i) * t_len + j] * dout[(bi * t_len + i) * channels + h * hs + d];
    }
    dk[d] = ak * scale;
    dv[d] = av;
  }
}

// x[b, t, c] = wte[idx[b, t], c] + wpe[t, c]; item = element.
GPT_HD void embedding_item(long item, int t_len, int channels, const long long* idx,
                           const float* wte, const float* wpe, float* x) {
  const long row = item / channels;
  const int c = (int)(item % channels);
  x[item] = wte[idx[row] * channels + c] + wpe[(row % t_len) * channels + c];
}
// dwte[v, c] = sum of dx over positions holding token v; item = (v, c).
GPT_HD void embedding_grad_tokens_item(long item, int rows, int channels, const long long* idx,
                                       const float* dx, float* dwte) {
  const long v = item / channels;
  const int c = (int)(item % channels);
  float sum = 0.0f;
  for (int r = 0; r < rows; ++r) {
    if (idx[r] == v) sum += dx[(long)r * channels + c];
  }
  dwte[item] = sum;
}
// dwpe[t, c] = sum over the batch of dx[b, t, c]; item = (t, c).
GPT_HD void embedding_grad_positions_item(long item, int batch, int t_len, int channels,
                                          const float* dx, float* dwpe) {
  float sum = 0.0f;
  for (int b = 0; b < batch; ++b) sum += dx[(long)b * t_len * channels + item];
  dwpe[item] = sum;
}

// Cross-entropy of one row of logits: loss[r] = logsumexp - logit[target]; item = row.
GPT_HD void cross_entropy_item(long item, int vocab, const float* logits, const long long* target,
                               float* loss, float* lse) {
  const float* row = logits + item * vocab;
  float maxv = -INFINITY;
  for (int v = 0; v < vocab; ++v) maxv = row[v] > maxv ? row[v] : maxv;
  float sum = 0.0f;
  for (int v = 0; v < vocab; ++v) sum += expf(row[v] - maxv);
  lse[item] = maxv + logf(sum);
  loss[item] = lse[item] - row[target[item]];
}
// dlogits[r, v] = (softmax - onehot) * dloss / rows; item = element.
GPT_HD void cross_entropy_grad_item(long item, int rows, int vocab, const float* logits,
                                    const long long* target, const float* lse,
                                    const float* dloss, float* dlogits) {
  const long r = item / vocab;
  const int v = (int)(item % vocab);
  const float prob = expf(logits[item] - lse[r]);
  dlogits[item] = (prob - (target[r] == v ? 1.0f : 0.0f)) * dloss[0] / rows;
}
// out[0] = mean of x over `count` values, summed in order; one item.
GPT_HD void mean_item(long item, int count, const float* x, float* out) {
  (void)item;
  float sum = 0.0f;
  for (int i = 0; i < count; ++i) sum += x[i];
  out[0] = sum / count;
}

// One AdamW step of one parameter; item = element. c1, c2: bias corrections 1 - beta^t.
GPT_HD void adamw_item(long item, float* param, const float* grad, float* m, float* v, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float c1,
                       float c2) {
  const float g = grad[item];
  m[item] = beta1 * m[item] + (1.0f - beta1) * g;
  v[item] = beta2 * v[item] + (1.0f - beta2) * g * g;
  const float mhat = m[item] / c1;
  const float vhat = v[item] / c2;
  param[item] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[item]);
}

#endif  // MEMVIRT_TESTS_PYTORCH_GPT_KERNELS_GPT_OPS_H_
