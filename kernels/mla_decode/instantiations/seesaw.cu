// The seesaw split-KV MLA decode kernel (kFast, 64-row tiles).
#include "mla_decode/splitkv_seesaw.cuh"
