#pragma once
// The tokenizer moved to text/tokenizer.hpp; this header keeps the installed
// include path <mmgpt/engine/tokenizer.hpp> working for programs that use it.
#include "text/tokenizer.hpp"
