# ctest: `mla generate --json` on a committed fixture gives Hugging Face's greedy ids, with the
# prompt prefilled whole, in chunks and token by token. Runs with cmake -P (no Python needed):
#   -DMLA=<path to mla> -DFIXTURE=<fixture dir>
file(READ "${FIXTURE}/golden.json" golden)
string(JSON prompt_count LENGTH "${golden}" prompt_ids)
string(JSON generated_count LENGTH "${golden}" generated_ids)
math(EXPR last "${prompt_count} - 1")
set(prompt "")
foreach(i RANGE ${last})
  string(JSON id GET "${golden}" prompt_ids ${i})
  list(APPEND prompt ${id})
endforeach()
list(JOIN prompt "," prompt)
math(EXPR last "${generated_count} - 1")
set(expected "")
foreach(i RANGE ${last})
  string(JSON id GET "${golden}" generated_ids ${i})
  list(APPEND expected ${id})
endforeach()
list(JOIN expected "," expected)

foreach(mode "--prefill-chunk=0" "--prefill-chunk=64" "--token-by-token")
  execute_process(
    COMMAND "${MLA}" generate "${FIXTURE}" --prompt-ids ${prompt} --max-tokens ${generated_count}
            --ignore-eos --json ${mode}
    OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "mla generate ${mode} failed (${status}): ${errors}")
  endif()
  string(JSON ids GET "${output}" ids)
  string(REGEX REPLACE "[][ \n]" "" ids "${ids}")
  if(NOT ids STREQUAL expected)
    message(FATAL_ERROR "mla generate ${mode}: ids ${ids}, expected (transformers) ${expected}")
  endif()
  message(STATUS "mla generate ${mode}: ${ids} (as transformers)")
endforeach()
