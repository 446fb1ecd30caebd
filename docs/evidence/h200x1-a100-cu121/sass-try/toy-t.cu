// issue 39: does an sm_80 SASS + compute_80 PTX binary (CUDA 11.8, cudart static) run on sm_90?
#include <cstdio>
__global__ void k(int* p) { *p = 42; }
#define CK(x) do { cudaError_t e = (x); printf("%-28s %s\n", #x, cudaGetErrorString(e)); if (e) return 1; } while (0)
int main() {
  int* p; int h = 0, n = 0;
  CK(cudaGetDeviceCount(&n));
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&p, 4));
  CK(cudaMemset(p, 0, 4));
  k<<<1, 1>>>(p);
  CK(cudaGetLastError());
  CK(cudaMemcpy(&h, p, 4, cudaMemcpyDeviceToHost));
  printf("kernel wrote %d\n", h);
  return h == 42 ? 0 : 1;
}
