#pragma once
/// Umbrella header of the IR core: types, ops, functions, modules, builder, verifier, text.
#include "tpullm/ir/builder.hpp"
#include "tpullm/ir/graph.hpp"
#include "tpullm/ir/module.hpp"
#include "tpullm/ir/text/parser.hpp"
#include "tpullm/ir/text/printer.hpp"
#include "tpullm/ir/verifier.hpp"
