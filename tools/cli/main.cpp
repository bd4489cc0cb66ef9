// mmgpt: convert PyTorch GPT checkpoints and run them on the CPU.
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>

#include "core/platform.hpp"
#include "formats/error.hpp"
#include "tools/cli/commands.hpp"

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which is
  // reported as one line naming the file, instead of the kernel killing mmgpt.
  std::signal(SIGXFSZ, SIG_IGN);
  mmgpt::platform::remember_argv0(argc > 0 ? argv[0] : nullptr);
  CLI::App app{"mmgpt: run PyTorch-trained GPT models on the CPU", "mmgpt"};
  app.require_subcommand(1);
  app.set_version_flag("--version", mmgpt::cli::version_text);
  mmgpt::cli::add_convert(app);
  mmgpt::cli::add_generate(app);
  mmgpt::cli::add_logits(app);
  mmgpt::cli::add_inspect(app);
  mmgpt::cli::add_tokenize(app);
  mmgpt::cli::add_detokenize(app);
  mmgpt::cli::add_perplexity(app);
  mmgpt::cli::add_bench(app);
  mmgpt::cli::add_serve(app);
  mmgpt::cli::add_chat(app);
  mmgpt::cli::add_chat_template(app);

  // An unknown first word: CLI11 says only "A subcommand is required", naming nothing.
  if (argc > 1) {
    const std::string first = argv[1];
    std::string known;
    bool is_command = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      is_command = is_command || sub->get_name() == first;
    }
    std::string problem;
    if (!first.empty() && first[0] != '-' && !is_command)
      problem = "unknown command '" + first + "' (the commands are " + known + ")";
    else if (first.empty())
      problem = "empty command (the commands are " + known + ")";
    else if (first[0] == '-' && first != "-h" && first != "--help" && first != "--version" && first != "--help-all")
      problem = "unknown option '" + first + "': give a command first (mmgpt COMMAND [OPTIONS])";
    if (!problem.empty()) {
      std::cerr << "mmgpt: error: " << problem << " (see 'mmgpt --help')\n";
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, whatever CLI11 would have printed: scripts read our stderr.
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::cerr << "mmgpt: error: " << what << " (see 'mmgpt --help')\n";
    return 2;
  } catch (const mmgpt::Error& e) {
    std::fflush(stdout);
    std::cerr << "mmgpt: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "mmgpt: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "mmgpt: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
