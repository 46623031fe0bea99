// The seesaw split-KV MLA decode kernel (kFast, 64-row tiles), and the duo experiment that uses its
// helpers.
#include "mla_decode/splitkv_seesaw.cuh"
#include "mla_decode/splitkv_duo.cuh"
