// The GPT-2 trainer's first forward kernels ported to OpenCL, one work-item per position, element or
// row as in the CUDA file.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define GELU_SCALING_FACTOR sqrt(2.0f / M_PI_F)

// encoder: out[b, t, :] = wte[inp[b, t], :] + wpe[t, :], a work-item per (b, t) looping over C
__kernel void encoder_forward_kernel1(__global float* out, __global const int* inp, __global const float* wte,
                                      __global const float* wpe, int B, int T, int C) {
    int idx = get_global_id(0);
    int N = B * T;

    if (idx < N) {
        int b = idx / T;
        int t = idx % T;
        __global float* out_bt = out + b * T * C + t * C;
        int ix = inp[b * T + t];
        __global const float* wte_ix = wte + ix * C;
        __global const float* wpe_t = wpe + t * C;
        for (int i = 0; i < C; i++) {
            out_bt[i] = wte_ix[i] + wpe_t[i];
        }
    }
}

// a work-item per (b, t, c) element
__kernel void encoder_forward_kernel2(__global float* out, __global const int* inp, __global const float* wte,
                                      __global const float* wpe, int B, int T, int C) {
    int idx = get_global_id(0);
    int N = B * T * C;

    if (idx < N) {
        int bt = idx / C;
        int b = bt / T;
        int t = bt % T;
        int c = idx % C;

        int ix = inp[b * T + t];

        __global float* out_btc = out + b * T * C + t * C + c;
        __global const float* wte_ix = wte + ix * C + c;
        __global const float* wpe_tc = wpe + t * C + c;
        *out_btc = *wte_ix + *wpe_tc;
    }
}

// layernorm over the C channels of each of N rows, a work-item per row
__kernel void layernorm_forward_kernel1(__global float* out, __global float* mean, __global float* rstd,
                                        __global const float* inp, __global const float* weight,
                                        __global const float* bias, int N, int C) {
    int idx = get_global_id(0);
    float eps = 1e-5f;

    if (idx < N) {
        __global const float* x = inp + idx * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) {
            m += x[i];
        }
        m = m / C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float xshift = x[i] - m;
            v += xshift * xshift;
        }
        v = v / C;
        float s = 1.0f / sqrt(v + eps);
        __global float* out_idx = out + idx * C;
        for (int i = 0; i < C; i++) {
            float n = (s * (x[i] - m));
            float o = n * weight[i] + bias[i];
            out_idx[i] = o;
        }
        mean[idx] = m;
        rstd[idx] = s;
    }
}

// softmax over the C entries of each of N rows, a work-item per row
__kernel void softmax_forward_kernel1(__global float* out, __global const float* inp, int N, int C) {
    int i = get_global_id(0);
    if (i < N) {
        __global const float* inp_row = inp + i * C;
        __global float* out_row = out + i * C;

        float maxval = -INFINITY;
        for (int j = 0; j < C; j++) {
            if (inp_row[j] > maxval) {
                maxval = inp_row[j];
            }
        }
        double sum = 0.0;
        for (int j = 0; j < C; j++) {
            out_row[j] = exp(inp_row[j] - maxval);
            sum += out_row[j];
        }
        for (int j = 0; j < C; j++) {
            out_row[j] /= (float)sum;
        }
    }
}

// matmul: out[bt, oc] = bias[oc] + sum over c of inp[bt, c] * weight[oc, c], a work-item per output
__kernel void matmul_forward_kernel1(__global float* out, __global const float* inp, __global const float* weight,
                                     __global const float* bias, int BT, int C, int OC) {
    int bt = get_global_id(0);
    int oc = get_global_id(1);
    if (bt < BT && oc < OC) {
        float val = bias[oc];
        __global const float* wrow = weight + oc * C;
        __global const float* inp_bt = inp + bt * C;
        for (int i = 0; i < C; i++) {
            val += inp_bt[i] * wrow[i];
        }
        out[bt * OC + oc] = val;
    }
}

// GELU, the tanh approximation, a work-item per element
__kernel void gelu_forward_kernel(__global float* out, __global const float* inp, int N) {
    int i = get_global_id(0);
    if (i < N) {
        float xi = inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = 0.5f * xi * (1.0f + tanh(GELU_SCALING_FACTOR * (xi + cube)));
    }
}

// the residual connection, a work-item per element
__kernel void residual_forward_kernel(__global float* out, __global const float* inp1, __global const float* inp2,
                                      int N) {
    int idx = get_global_id(0);
    if (idx < N) {
        out[idx] = inp1[idx] + inp2[idx];
    }
}

// crossentropy: losses[b, t] = -log(probs[b, t, targets[b, t]]), a work-item per position
__kernel void crossentropy_forward_kernel1(__global float* losses, __global const float* probs,
                                           __global const int* targets, int B, int T, int V) {
    int i = get_global_id(0);
    if (i < B * T) {
        int b = i / T;
        int t = i % T;
        __global const float* probs_bt = probs + b * T * V + t * V;
        int ix = targets[b * T + t];
        losses[b * T + t] = -log(probs_bt[ix]);
    }
}
