/* encoder.cu of the CUDA module, built against the CPU emulation of CUDA (cuda_emu.h); test-only. */
#include "cuda_emu.h" /* first: the shipped .cu files expect the emulation when SGC_EMULATE is set */
#include "../../../backends/cuda/encoder.cu"
