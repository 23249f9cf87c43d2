# cmake -P script: checkpoints derived from the shared MoE ones with one config.json field
# changed (the weights are a copy of the original's): -DMODELS=<tests/data/models> -DOUT=<dir>.
# Each is a bad-input case the CLI must refuse in one line with exit 2.
function(moe_variant name source from to)
  set(dir ${OUT}/${name})
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  file(READ ${MODELS}/${source}/config.json text)
  string(REPLACE "${from}" "${to}" changed "${text}")
  if(changed STREQUAL text)
    message(FATAL_ERROR "${name}: '${from}' is not in ${source}/config.json")
  endif()
  file(WRITE ${dir}/config.json "${changed}")
  file(COPY ${MODELS}/${source}/model.safetensors ${MODELS}/${source}/goldens.safetensors
       DESTINATION ${dir})
endfunction()
moe_variant(topk-above-experts qwen3moe-e16k4 "\"num_experts_per_tok\": 4" "\"num_experts_per_tok\": 17")
moe_variant(router-width mixtral-e8k2 "\"num_local_experts\": 8" "\"num_local_experts\": 6")
moe_variant(expert-shape qwen3moe-e16k4 "\"moe_intermediate_size\": 32" "\"moe_intermediate_size\": 48")
moe_variant(qwen2-moe qwen3moe-e16k4 "\"model_type\": \"qwen3_moe\"" "\"model_type\": \"qwen2_moe\"")
moe_variant(deepseek-v3 qwen3moe-e16k4 "\"model_type\": \"qwen3_moe\"" "\"model_type\": \"deepseek_v3\"")
