// The table of `tpullm` subcommands: adding one = its cmd_<name>.cpp, a declaration and a row
// here, a section in docs/cli.md and CLI tests in tests/cli/.
#include "command.hpp"

namespace tpullm::cli {

int cmd_import(const std::vector<std::string>& args);
int cmd_verify(const std::vector<std::string>& args);
int cmd_make_model(const std::vector<std::string>& args);
int cmd_compile(const std::vector<std::string>& args);
int cmd_inspect(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_chat(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_calibrate(const std::vector<std::string>& args);

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"import",
       "import MODEL_DIR --emit top -o DIR   build the Top stage modules of a "
       "HuggingFace checkpoint\n"
       "                                       and write one .tir file per module into "
       "DIR",
       cmd_import},
      {"verify",
       "verify MODEL_DIR --level top|tpu|bundle  run the golden scenarios "
       "(goldens.safetensors)\n"
       "                                       through interpreted Top modules, compiled "
       "programs or a\n"
       "                                       compiled bundle, and compare logits",
       cmd_verify},
      {"compile",
       "compile MODEL_DIR -o FILE.bundle     compile a checkpoint into one deployable bundle",
       cmd_compile},
      {"calibrate",
       "calibrate MODEL_DIR -o calib.json    record the activation ranges of a float model on "
       "sample\n"
       "                                       prompts (for compile --mode int8 --act-quant "
       "static)",
       cmd_calibrate},
      {"run",
       "run FILE.bundle --prompt-ids 1,2,3   generate tokens from a bundle (greedy or sampled)",
       cmd_run},
      {"chat",
       "chat FILE.bundle [--system TEXT]     a multi-turn conversation in text (each turn prefills "
       "only\n"
       "                                       its new tokens onto the kept KV cache)",
       cmd_chat},
      {"bench",
       "bench FILE.bundle                    prefill / decode speed against this machine's "
       "roofline",
       cmd_bench},
      {"inspect",
       "inspect FILE.bundle [--json]         functions, plans, memory regions and weights of a "
       "bundle",
       cmd_inspect},
      {"make-model",
       "make-model --preset NAME -o DIR      write a checkpoint with random weights at a real "
       "model's\n"
       "                                       shapes (qwen2.5-0.5b, llama3.2-1b, tiny)",
       cmd_make_model},
      {"tokenize",
       "tokenize DIR|BUNDLE [--text T]       ids and pieces of a text (stdin without --text), or\n"
       "                                       the text of ids (--decode 1,2,3)",
       cmd_tokenize},
      {"serve",
       "serve FILE.bundle [--port 8080]      an OpenAI-compatible HTTP server (chat and text\n"
       "                                       completions, streaming, per-slot KV caches)",
       cmd_serve},
  };
  return table;
}

} // namespace tpullm::cli
