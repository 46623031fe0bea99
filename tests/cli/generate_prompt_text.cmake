# ctest: `mla generate --prompt TEXT` on a tiny fixture paired with DeepSeek-V3's tokenizer gives
# the same ids as `--prompt-ids` with the tokenizer's encoding, and its `text` is the tokenizer's
# decode of the generated ids. Without a tokenizer.json, --prompt is refused with a clear error.
#   cmake -DMLA=<mla> -DFIXTURE=<fixture dir> -DTOKENIZER=<dir with tokenizer.json> -DWORK=<dir> -P
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(GLOB model_files "${FIXTURE}/config.json" "${FIXTURE}/model*.safetensors"
     "${FIXTURE}/model.safetensors.index.json")
file(COPY ${model_files} "${TOKENIZER}/tokenizer.json" "${TOKENIZER}/tokenizer_config.json"
     DESTINATION "${WORK}")

function(run_mla out_var)
  execute_process(COMMAND "${MLA}" ${ARGN} OUTPUT_VARIABLE output ERROR_VARIABLE errors
                  RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "mla ${ARGN} failed (${status}): ${errors}")
  endif()
  set(${out_var} "${output}" PARENT_SCOPE)
endfunction()

function(json_ids json key out_var)
  string(JSON ids GET "${json}" ${key})
  string(REGEX REPLACE "[][ \n]" "" ids "${ids}")
  set(${out_var} "${ids}" PARENT_SCOPE)
endfunction()

set(prompt "1 2 3 4")
run_mla(encoded tokenize "${WORK}" --text "${prompt}")
string(STRIP "${encoded}" encoded)
run_mla(from_text generate "${WORK}" --prompt "${prompt}" --max-tokens 6 --ignore-eos --json)
json_ids("${from_text}" prompt_ids prompt_ids)
if(NOT prompt_ids STREQUAL encoded)
  message(FATAL_ERROR "--prompt encoded as ${prompt_ids}, mla tokenize says ${encoded}")
endif()
json_ids("${from_text}" ids generated)
run_mla(from_ids generate "${WORK}" --prompt-ids ${encoded} --max-tokens 6 --ignore-eos --json)
json_ids("${from_ids}" ids generated_from_ids)
if(NOT generated STREQUAL generated_from_ids)
  message(FATAL_ERROR "--prompt gave ${generated}, --prompt-ids gave ${generated_from_ids}")
endif()
string(JSON text GET "${from_text}" text)
run_mla(decoded tokenize "${WORK}" --decode ${generated} --skip-special --json)
string(JSON decoded_text GET "${decoded}" text)
if(NOT text STREQUAL decoded_text)
  message(FATAL_ERROR "generate's text '${text}' differs from the tokenizer's '${decoded_text}'")
endif()

execute_process(COMMAND "${MLA}" generate "${FIXTURE}" --prompt "hello" --max-tokens 1
                OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE status)
if(status EQUAL 0 OR NOT errors MATCHES "--prompt needs .*tokenizer.json, which does not exist")
  message(FATAL_ERROR "--prompt without a tokenizer: status ${status}, stderr '${errors}'")
endif()
message(STATUS "mla generate --prompt '${prompt}' → ${prompt_ids} → ${generated} ('${text}')")
