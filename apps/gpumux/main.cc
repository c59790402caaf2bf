// gpumux: thin main; everything happens in the cli module.
#include <iostream>

#include "gpumux/cli/cli.h"

int main(int argc, char** argv) { return gpumux::cli::Main(argc, argv, std::cout, std::cerr); }
