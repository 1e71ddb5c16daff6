// A grey image's histogram into 256 bins, the counts added to what the bins hold: a work-item per
// pixel of a two-dimensional launch and an atomic increment of its global bin, as first written.
__kernel void image_histogram(__global const uchar *img, __global uint *hist, int width, int height) {
    int x = get_global_id(0);
    int y = get_global_id(1);
    if (x >= width || y >= height) return;
    atomic_inc(&hist[img[y * width + x]]);
}
