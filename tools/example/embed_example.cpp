// A complete program embedding mmgpt through its public API (engine/mmgpt.hpp):
// load a converted model, tokenize a prompt, stream a continuation, stop early.
//
//   mmgpt_embed_example MODEL.mmgpt "PROMPT" [MAX_CHARS]
//
// Prints the prompt and up to 100 generated tokens (greedy), stopping early
// once MAX_CHARS characters of continuation have been printed.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/mmgpt.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.mmgpt PROMPT [MAX_CHARS]\n", argv[0]);
    return 2;
  }
  const size_t max_chars = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : SIZE_MAX;
  try {
    const mmgpt::LanguageModel lm = mmgpt::LanguageModel::load(argv[1]);
    const std::vector<int32_t> prompt = lm.encode(argv[2]);

    mmgpt::GenerateOptions options;
    options.max_new_tokens = 100;
    options.sampling.greedy = true;

    std::fputs(argv[2], stdout);
    size_t printed = 0;
    const mmgpt::GenerationResult result = lm.generate(prompt, options, [&](const mmgpt::TokenEvent& event) {
      std::fwrite(event.text.data(), 1, event.text.size(), stdout);
      std::fflush(stdout);
      printed += event.text.size();
      return printed < max_chars;  // returning false stops generation
    });
    std::printf("\n[%zu tokens, %s]\n", result.tokens.size(),
                result.reason == mmgpt::StopReason::Callback ? "stopped by the callback" : "finished");
  } catch (const mmgpt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
