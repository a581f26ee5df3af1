/* module.cu of the CUDA module, built against the CPU emulation of CUDA (cuda_emu.h); test-only. */
#include "../../../backends/cuda/module.cu"
