// A histogram of bytes into 256 bins, the counts added to what the bins hold: a work-item per byte
// and an atomic increment of its global bin, as first written.
__kernel void histogram(__global const uchar *data, __global uint *bins, int n) {
    int i = get_global_id(0);
    if (i < n) {
        atomic_inc(&bins[data[i]]);
    }
}
