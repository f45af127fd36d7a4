// Every kernel of the training loop: GPT_OP(name, (parameters), (arguments)), expanded by
// gpt_kernels.cu into a CUDA kernel and its launcher and by gpt_kernels_host.cc into the host
// implementation. The parameters follow the item function of the same name in gpt_ops.h.
GPT_OP(gemm,
       (int batch, int m, int n_cols, int k, const float* a, long stride_a, int lda, int trans_a,
        const float* b, long stride_b, int ldb, int trans_b, float* c, long stride_c, int ldc,
        float alpha, float beta),
       (batch, m, n_cols, k, a, stride_a, lda, trans_a, b, stride_b, ldb, trans_b, c, stride_c,
        ldc, alpha, beta))
GPT_OP(add_bias, (int cols, float* y, const float* bias), (cols, y, bias))
GPT_OP(bias_grad, (int rows, int cols, const float* dy, float* db), (rows, cols, dy, db))
GPT_OP(add, (const float* a, const float* b, float* out), (a, b, out))
GPT_OP(fill, (float* out, float value), (out, value))
GPT_OP(gelu, (const float* x, float* y), (x, y))
GPT_OP(gelu_grad, (const float* x, const float* dy, float* dx), (x, dy, dx))
GPT_OP(layernorm,
       (int cols, const float* x, const float* g, const float* b, float* y, float* mean,
        float* rstd),
       (cols, x, g, b, y, mean, rstd))
GPT_OP(layernorm_grad_x,
       (int cols, const float* x, const float* g, const float* mean, const float* rstd,
        const float* dy, float* dx),
       (cols, x, g, mean, rstd, dy, dx))
GPT_OP(layernorm_grad_params,
       (int rows, int cols, const float* x, const float* mean, const float* rstd, const float* dy,
        float* dg, float* db),
       (rows, cols, x, mean, rstd, dy, dg, db))
GPT_OP(attention, (int heads, int t_len, int channels, const float* qkv, float* p, float* out),
       (heads, t_len, channels, qkv, p, out))
GPT_OP(attention_grad_q,
       (int heads, int t_len, int channels, const float* qkv, const float* p, const float* dout,
        float* ds, float* dqkv),
       (heads, t_len, channels, qkv, p, dout, ds, dqkv))
GPT_OP(attention_grad_kv,
       (int heads, int t_len, int channels, const float* qkv, const float* p, const float* ds,
        const float* dout, float* dqkv),
       (heads, t_len, channels, qkv, p, ds, dout, dqkv))
GPT_OP(embedding,
       (int t_len, int channels, const long long* idx, const float* wte, const float* wpe,
        float* x),
       (t_len, channels, idx, wte, wpe, x))
GPT_OP(embedding_grad_tokens,
       (int rows, int channels, const long long* idx, const float* dx, float* dwte),
       (rows, channels, idx, dx, dwte))
GPT_OP(embedding_grad_positions, (int batch, int t_len, int channels, const float* dx, float* dwpe),
       (batch, t_len, channels, dx, dwpe))
GPT_OP(cross_entropy,
       (int vocab, const float* logits, const long long* target, float* loss, float* lse),
       (vocab, logits, target, loss, lse))
GPT_OP(cross_entropy_grad,
       (int rows, int vocab, const float* logits, const long long* target, const float* lse,
        const float* dloss, float* dlogits),
       (rows, vocab, logits, target, lse, dloss, dlogits))
GPT_OP(mean, (int count, const float* x, float* out), (count, x, out))
GPT_OP(adamw,
       (float* param, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
        float eps, float weight_decay, float c1, float c2),
       (param, grad, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2))
