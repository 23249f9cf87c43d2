# Text through bundles (included by tests/text/CMakeLists.txt). A tiny random model with Qwen's
# vocabulary size and the real Qwen3 tokenizer files copied beside it (as a user would put them
# next to a checkpoint), compiled into bundles that carry the tokenizer and chat template.
set(C ${CMAKE_CURRENT_BINARY_DIR}/chat)
set(models ${TPULLM_TEST_DATA_DIR}/models)
file(MAKE_DIRECTORY ${C})
add_test(NAME text-cli:chat-model
  COMMAND /bin/sh -c "set -e; rm -rf '${C}/model'; '$<TARGET_FILE:tpullm-driver>' make-model --preset tiny --vocab 151936 --dtype bf16 -o '${C}/model' >/dev/null; cp '${tok_cache}/qwen3/tokenizer.json' '${tok_cache}/qwen3/tokenizer_config.json' '${C}/model/'")
set_tests_properties(text-cli:chat-model PROPERTIES FIXTURES_SETUP chat-model TIMEOUT 300)
function(tpullm_chat_test name exit regex)
  tpullm_tokenize_test(${name} ${exit} "${regex}" ${ARGN})
  set_tests_properties(text-cli:${name} PROPERTIES FIXTURES_REQUIRED chat-model)
endfunction()
tpullm_chat_test(chat-compile 0 "wrote .*chat.bundle"
  ${tpullm} compile ${C}/model -o ${C}/chat.bundle --seq-length 256 --max-input-length 32
  --decode-chunks 128 --mode bf16)
set_tests_properties(text-cli:chat-compile PROPERTIES FIXTURES_SETUP chat-bundle)
# short.bundle also carries a draft model for --draft self (compile --draft-mode): one layer in
# w8a16 with a w8 lm_head, about half a step of the model, and a verify segment of 5 rows (the
# last token and 4 drafts; tests/text/draft_cli.sh runs them).
tpullm_chat_test(chat-compile-short 0 "draft model \\(--draft self\\): .*wrote .*short.bundle"
  ${tpullm} compile ${C}/model -o ${C}/short.bundle --seq-length 64 --max-input-length 16
  --decode-chunk 0 --mode bf16 --draft-mode w8a16 --draft-layers 1 --draft-lm-head-dtype w8
  --verify-lengths 5)
set_tests_properties(text-cli:chat-compile-short PROPERTIES FIXTURES_SETUP chat-bundle)
# A verify segment holds the last token and 1 to 15 drafts.
tpullm_chat_test(chat-compile-verify-too-long 2 "verify_lengths: .*must be in \\[2, 16\\].*got 17"
  ${tpullm} compile ${C}/model -o ${C}/never.bundle --seq-length 64 --max-input-length 32
  --decode-chunk 0 --verify-lengths 4,17)
tpullm_chat_test(chat-compile-verify-one-row 2 "verify_lengths: .*must be in \\[2, 8\\].*got 1"
  ${tpullm} compile ${C}/model -o ${C}/never.bundle --seq-length 64 --max-input-length 8
  --decode-chunk 0 --verify-lengths 1)
tpullm_chat_test(chat-compile-verify-no-history 2 "verify_lengths: a verify segment runs through prefill_kv.*--no-history"
  ${tpullm} compile ${C}/model -o ${C}/never.bundle --seq-length 64 --max-input-length 8
  --decode-chunk 0 --no-history --verify-lengths 4)
tpullm_chat_test(chat-compile-nohist 0 "wrote .*short-nohist.bundle"
  ${tpullm} compile ${C}/model -o ${C}/short-nohist.bundle --seq-length 64 --max-input-length 16
  --decode-chunk 0 --no-history --mode bf16)
set_tests_properties(text-cli:chat-compile-nohist PROPERTIES FIXTURES_SETUP chat-bundle)
function(tpullm_bundle_text_test name exit regex)
  tpullm_tokenize_test(${name} ${exit} "${regex}" ${ARGN})
  set_tests_properties(text-cli:${name} PROPERTIES FIXTURES_REQUIRED "chat-model;chat-bundle")
endfunction()

# The bundle alone tokenizes as the checkpoint's files do (the oracle's ids).
tpullm_bundle_text_test(bundle-tokenize 0 "ids: ${qwen3_plain}\n"
  ${tpullm} tokenize ${C}/chat.bundle --text "Hello world")
tpullm_bundle_text_test(bundle-inspect-text 0 "tokenizer .*chat template"
  ${tpullm} inspect ${C}/chat.bundle)
# Raw text and one chat turn: text streams out, the run stops on its budget (random weights).
tpullm_bundle_text_test(run-prompt 0 "stopped: token budget after 6 tokens"
  ${tpullm} run ${C}/chat.bundle --prompt "Hello, world" -n 6)
tpullm_bundle_text_test(run-chat 0 "stopped: token budget after 6 tokens"
  ${tpullm} run ${C}/chat.bundle --chat "Hello" --system "Answer briefly." -n 6)
tpullm_bundle_text_test(run-two-prompts 2 "takes one of --prompt, --chat and --prompt-ids"
  ${tpullm} run ${C}/chat.bundle --chat "Hello" --prompt-ids 1,2)
tpullm_bundle_text_test(run-system-without-chat 2 "--system: applies only with --chat"
  ${tpullm} run ${C}/chat.bundle --prompt "Hello" --system "x")
# --stop (runtime/generation.hpp): a stop string cut from the middle of the greedy answer ends
# the same run right before its first occurrence, in `run` and in `chat`; ids cannot match one.
foreach(mode IN ITEMS run chat)
  add_test(NAME text-cli:${mode}-stop-string
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/stop_cli.sh $<TARGET_FILE:tpullm-driver>
            ${C}/chat.bundle ${C}/stop-${mode} ${mode})
  set_tests_properties(text-cli:${mode}-stop-string PROPERTIES
    FIXTURES_REQUIRED "chat-model;chat-bundle" TIMEOUT 300)
endforeach()
# --draft prompt-lookup (runtime/speculation.hpp): the same answers as without it; bad values are
# refused in one line.
add_test(NAME text-cli:run-draft
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/draft_cli.sh $<TARGET_FILE:tpullm-driver>
          ${C}/chat.bundle ${C}/draft ${C}/short.bundle)
set_tests_properties(text-cli:run-draft PROPERTIES FIXTURES_REQUIRED "chat-model;chat-bundle"
  TIMEOUT 300 PASS_REGULAR_EXPRESSION "ok: run --draft gives the plain answers")
tpullm_bundle_text_test(run-draft-self-none 2 "--draft: self: this bundle has no draft model \\(compile it with --draft-mode"
  ${tpullm} run ${C}/chat.bundle --prompt hi --draft self)
tpullm_chat_test(compile-draft-layers-bad 2 "--draft-layers: must be in \\[0, 2\\] \\(0: every layer\\), got 5"
  ${tpullm} compile ${C}/model -o ${C}/never.bundle --draft-mode w4a16 --draft-layers 5)
tpullm_bundle_text_test(run-draft-bad 2 "--draft: 'ngram' is neither none, prompt-lookup, self nor an existing draft bundle file"
  ${tpullm} run ${C}/chat.bundle --prompt hi --draft ngram)
tpullm_bundle_text_test(run-draft-too-long 2 "--draft-max: must be in \\[1, 15\\], got 40"
  ${tpullm} run ${C}/chat.bundle --prompt hi --draft prompt-lookup --draft-max 40)
tpullm_bundle_text_test(run-draft-no-history 2 "--draft: the verify call needs the prefill_kv stage, and this bundle was compiled with --no-history"
  ${tpullm} run ${C}/short-nohist.bundle --prompt hi --draft prompt-lookup)
set_tests_properties(text-cli:run-draft-no-history PROPERTIES FIXTURES_REQUIRED "chat-model;chat-bundle")
tpullm_bundle_text_test(run-draft-other-vocab 2 "--draft: .*plain.bundle: its vocabulary has 512 ids, the model's 151936"
  ${tpullm} run ${C}/chat.bundle --prompt hi --draft ${C}/plain.bundle)
set_tests_properties(text-cli:run-draft-other-vocab PROPERTIES FIXTURES_REQUIRED "chat-model;chat-bundle;plain-bundle")
tpullm_bundle_text_test(run-stop-with-ids 2 "--stop: applies to text answers \\(--prompt, --chat\\), not to --prompt-ids"
  ${tpullm} run ${C}/chat.bundle --prompt-ids 1,2 --stop x)
# Constrained answers (docs/grammar.md): the random model's answer under a JSON Schema enum, a
# grammar file or json_object can only be a sentence of that language, ended by eos where the
# language may end; refusals are one line, exit 2.
file(WRITE ${C}/yesno.schema.json "{\"enum\": [\"yes\", \"no\"]}")
file(WRITE ${C}/abcd.gbnf "root ::= \"ab\" | \"cd\" \"!\"*\n")
file(WRITE ${C}/not.schema.json "{\"type\": \"object\", \"not\": {}}")
foreach(seed IN ITEMS 1 2 3)
  tpullm_bundle_text_test(run-json-schema-${seed} 0 "^\"(yes|no)\"\n(.|\n)*stopped: eos after"
    ${tpullm} run ${C}/chat.bundle --chat "Yes or no?" -n 16 --temperature 1 --seed ${seed}
    --json-schema ${C}/yesno.schema.json)
endforeach()
tpullm_bundle_text_test(run-grammar 0 "^(ab|cd!*)\n(.|\n)*stopped: (eos|token budget) after"
  ${tpullm} run ${C}/chat.bundle --prompt "Say it" -n 12 --grammar ${C}/abcd.gbnf)
tpullm_bundle_text_test(run-json 0 "^\\{"
  ${tpullm} run ${C}/chat.bundle --chat "JSON please" -n 8 --json)
file(WRITE ${C}/yesno-turn.txt "Yes or no?\n")
tpullm_bundle_text_test(chat-json-schema 0 "\"(yes|no)\"\n(.|\n)*stopped: eos"
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/chat.bundle' -n 16 --json-schema '${C}/yesno.schema.json' < '${C}/yesno-turn.txt'")
tpullm_bundle_text_test(run-json-schema-refused 2 "json schema: 'not' is not supported at /not"
  ${tpullm} run ${C}/chat.bundle --chat "x" --json-schema ${C}/not.schema.json)
tpullm_bundle_text_test(run-two-constraints 2 "takes no"
  ${tpullm} run ${C}/chat.bundle --chat "x" --json --grammar ${C}/abcd.gbnf)
tpullm_bundle_text_test(run-json-with-ids 2 "apply to text answers"
  ${tpullm} run ${C}/chat.bundle --prompt-ids 1,2 --json)
tpullm_bundle_text_test(run-json-schema-missing 2 "yesno-missing.json"
  ${tpullm} run ${C}/chat.bundle --chat "x" --json-schema ${C}/yesno-missing.json)

# Five turns piped in: every later turn reuses the cached conversation and prefills only its
# new tokens (prefill_kv), as the per-turn figures show.
file(WRITE ${C}/five.txt "Hi there\nWhat is two plus two?\n/reset\nTell me about the sea.\nAnd then?\nThanks, bye\n")
tpullm_bundle_text_test(chat-five-turns 0 "turn 1: [0-9]+ prompt tokens prefilled, 0 reused.*turn 2: [0-9]+ prompt tokens prefilled, [1-9][0-9]* reused.*turn 3: [0-9]+ prompt tokens prefilled, 0 reused.*turn 4: [0-9]+ prompt tokens prefilled, [1-9][0-9]* reused.*turn 5: [0-9]+ prompt tokens prefilled, [1-9][0-9]* reused"
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/chat.bundle' -n 5 < '${C}/five.txt'")
file(WRITE ${C}/messages.json "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"}]")
tpullm_bundle_text_test(chat-json-messages 0 "turn 1: [0-9]+ prompt tokens prefilled"
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/chat.bundle' -n 3 < '${C}/messages.json'")
file(WRITE ${C}/bad-messages.json "[{\"content\": \"no role\"}]")
tpullm_bundle_text_test(chat-json-bad 2 "^tpullm chat: invalid input: messages: each message must be an object with a string \"role\"\n$"
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/chat.bundle' < '${C}/bad-messages.json'")
# A turn that does not fit the compiled sequence says so, offers /reset, and the next turn after
# /reset works; the command then exits 2 (a turn was refused).
string(REPEAT "word " 80 long_line)
file(WRITE ${C}/overflow.txt "${long_line}\n/reset\nHi\n")
tpullm_bundle_text_test(chat-overflow 2 "leave no room for an answer.*/reset.*turn 1: "
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/short.bundle' -n 3 < '${C}/overflow.txt'")
# --context-overflow truncate-middle (runtime/context_overflow.hpp): eight turns outgrow the
# 64 positions; the earliest turns are left out, said on stderr, and every turn is answered.
file(WRITE ${C}/many.txt "Tell me about the sea please\nAnd about the wind today\nWhat of the sky at night\nAnd the rivers in spring\nTell me about the hills\nAnd the roads to the west\nWhat do the birds sing\nThanks, that is all\n")
tpullm_bundle_text_test(chat-truncate-middle 0 "context full: the [1-9][0-9]* earliest messages \\([1-9][0-9]* tokens\\) left out.*turn 8: "
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/short.bundle' -n 3 --system 'Be brief.' --context-overflow truncate-middle < '${C}/many.txt'")
tpullm_bundle_text_test(chat-overflow-policy-bad 2 "--context-overflow: 'drop' is not a policy \\(refuse or truncate-middle\\)"
  ${tpullm} chat ${C}/short.bundle --context-overflow drop)
# --chat rendering through the template, on the checkpoint's files and on the bundle alike.
file(WRITE ${C}/conv.json "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}")
tpullm_tokenize_test(tokenize-chat-dir 0 "<\\|im_start\\|>user\nHello<\\|im_end\\|>\n<\\|im_start\\|>assistant\n"
  ${tpullm} tokenize ${tok_cache}/qwen3 --chat ${C}/conv.json)
tpullm_bundle_text_test(tokenize-chat-bundle 0 "\"text\":\"<\\|im_start\\|>user\\\\nHello<\\|im_end\\|>"
  ${tpullm} tokenize ${C}/chat.bundle --chat ${C}/conv.json --json)
tpullm_tokenize_test(tokenize-chat-with-text 2 "--chat: cannot be combined"
  ${tpullm} tokenize ${tok_cache}/qwen3 --chat ${C}/conv.json --text hi)
# A bundle without a tokenizer, and a tokenizer that does not belong to the model.
tpullm_tokenize_test(plain-compile 0 "wrote .*plain.bundle"
  ${tpullm} compile ${models}/llama-gqa -o ${C}/plain.bundle --seq-length 128)
set_tests_properties(text-cli:plain-compile PROPERTIES FIXTURES_SETUP plain-bundle)
foreach(t IN ITEMS run-prompt-no-tokenizer chat-no-tokenizer tokenize-no-tokenizer)
  set(cmd run ${C}/plain.bundle --prompt hi)
  if(t STREQUAL "chat-no-tokenizer")
    set(cmd chat ${C}/plain.bundle)
  elseif(t STREQUAL "tokenize-no-tokenizer")
    set(cmd tokenize ${C}/plain.bundle --text hi)
  endif()
  tpullm_tokenize_test(${t} 2 "plain.bundle: this bundle has no tokenizer" ${tpullm} ${cmd})
  set_tests_properties(text-cli:${t} PROPERTIES FIXTURES_REQUIRED plain-bundle)
endforeach()
add_test(NAME text-cli:small-model
  COMMAND /bin/sh -c "set -e; rm -rf '${C}/small'; '$<TARGET_FILE:tpullm-driver>' make-model --preset tiny --dtype f32 -o '${C}/small' >/dev/null; cp '${tok_cache}/qwen3/tokenizer.json' '${C}/small/'")
set_tests_properties(text-cli:small-model PROPERTIES FIXTURES_SETUP small-model)
tpullm_tokenize_test(compile-foreign-tokenizer 2 "tokenizer.json has 151669 tokens, more than the model's 512 embedding rows"
  ${tpullm} compile ${C}/small -o ${C}/never.bundle)
set_tests_properties(text-cli:compile-foreign-tokenizer PROPERTIES FIXTURES_REQUIRED small-model)
# An answer that cannot be written (stdout on /dev/full) stops the conversation at its first
# piece: one line, exit 1, no turn completed (no per-turn figures).
tpullm_bundle_text_test(chat-stdout-full 1 "^chatting with[^\n]*\ntpullm chat: I/O error: <stdout>: write failed\n$"
  /bin/sh -c "exec '$<TARGET_FILE:tpullm-driver>' chat '${C}/chat.bundle' -n 5 < '${C}/five.txt' > /dev/full")
