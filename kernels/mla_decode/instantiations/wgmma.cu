// The wgmma split-KV MLA decode kernel, 64-row tiles.
#include "mla_decode/splitkv_wgmma.cuh"
