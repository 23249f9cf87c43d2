// Out-of-line definitions of tpullm/ir/text/parser.hpp (compiled once into tpullm_core).
#include "tpullm/ir/text/parser.hpp"

namespace tpullm::ir::text {

auto Parser::parse_module() -> Module {
  expect_keyword("module");
  Module m(expect(Tok::at_id, "a module name (@name)").text);
  expect(Tok::l_brace, "'{'");
  while (cur_.kind != Tok::r_brace) {
    if (is_keyword("weight"))
      parse_weight(m);
    else if (is_keyword("func"))
      parse_function(m);
    else
      error("expected 'weight', 'func' or '}'");
  }
  advance();
  if (cur_.kind != Tok::eof)
    error("unexpected text after the module");
  return m;
}

auto Parser::parse_type() -> TensorType {
  const Location at = cur_.loc;
  expect_keyword("tensor");
  if (cur_.kind != Tok::less)
    error("expected '<' after 'tensor'");
  Token body = lex_.lex_shape(); // lexes straight after '<'
  cur_ = lex_.next();
  TensorType t;
  std::string_view s = body.text;
  while (true) {
    const auto x = s.find('x');
    if (x == std::string_view::npos || x == 0 ||
        !std::all_of(s.begin(), s.begin() + x, [](char c) { return c >= '0' && c <= '9'; }))
      break;
    std::int64_t d = 0;
    auto r = std::from_chars(s.data(), s.data() + x, d);
    if (r.ec != std::errc())
      throw DiagnosticError(body.loc,
                            "dimension '" + std::string(s.substr(0, x)) + "' is too large");
    t.shape.push_back(d);
    s.remove_prefix(x + 1);
  }
  auto dt = parse_dtype(s);
  if (!dt)
    throw DiagnosticError(body.loc, "unknown element type '" + std::string(s) + "' in tensor type");
  t.dtype = *dt;
  if (cur_.kind == Tok::comma) {
    advance();
    if (is_keyword("panels")) {
      advance();
      t.layout = Layout::panels;
      if (cur_.kind == Tok::comma) {
        advance();
        t.quant = parse_quant();
      }
    } else {
      t.quant = parse_quant();
    }
  }
  if (auto why = kv_rows_violation(t))
    throw DiagnosticError(body.loc, *why);
  if (cur_.kind != Tok::greater)
    throw DiagnosticError(cur_.loc, "expected '>' to close the tensor type started at " + at.str());
  advance();
  if (auto why = t.limit_violation())
    throw DiagnosticError(body.loc, *why);
  return t;
}

auto Parser::parse_quant() -> QuantSpec {
  expect_keyword("quant");
  expect(Tok::less, "'<'");
  QuantSpec q;
  const Token f = expect(Tok::bare_id, "a quantization format (gptq, awq, packed)");
  if (!parse_quant_spelling(f.text, q))
    throw DiagnosticError(f.loc, "unknown quantization format '" + f.text + "'");
  if (q.format == QuantFormat::kv_rows) { // an int8 KV cache: no group, no flags
    expect(Tok::greater, "'>' (quant<kv_rows> takes no group or flags)");
    return q;
  }
  expect(Tok::comma, "','");
  expect_keyword("group");
  expect(Tok::equal, "'='");
  q.group_size = parse_int();
  if (q.group_size < 0)
    error("group size must be >= 0");
  while (cur_.kind == Tok::comma) {
    advance();
    const Token flag = expect(Tok::bare_id, "'zero_point', 'act_order', 'min' or 'super'");
    if (flag.text == "super") {
      if (q.super_rows != 0)
        throw DiagnosticError(flag.loc, "'super' given twice");
      expect(Tok::equal, "'='");
      q.super_rows = parse_int();
      if (q.super_rows <= 0)
        error("super-block rows must be > 0");
    } else if (flag.text == "zero_point")
      q.zero_point = true;
    else if (flag.text == "act_order")
      q.act_order = true;
    else if (flag.text == "min")
      q.min = true;
    else
      throw DiagnosticError(flag.loc, "unknown quantization flag '" + flag.text + "'");
  }
  if (q.super_rows != 0 && q.format != QuantFormat::packed)
    throw DiagnosticError(f.loc, "'super' (two-level scales) applies to packed weights only");
  expect(Tok::greater, "'>'");
  return q;
}

auto Parser::parse_weight(Module& m) -> void {
  advance();
  const Token n = expect(Tok::at_id, "a weight name (@name)");
  expect(Tok::colon, "':'");
  Weight w{n.text, parse_type(), {}};
  if (m.find_weight(n.text))
    throw DiagnosticError(n.loc, "weight @" + n.text + " is declared twice");
  m.add_weight(std::move(w));
}

auto Parser::parse_function(Module& m) -> void {
  advance();
  const Token n = expect(Tok::at_id, "a function name (@name)");
  if (m.find_function(n.text))
    throw DiagnosticError(n.loc, "function @" + n.text + " is defined twice");
  Function& f = m.add_function(n.text);
  f.set_loc(n.loc);
  std::map<std::string, std::vector<Value*>> values;
  expect(Tok::l_paren, "'('");
  if (cur_.kind != Tok::r_paren) {
    while (true) {
      const Token a = expect(Tok::percent_id, "an argument (%name)");
      expect(Tok::colon, "':'");
      auto t = parse_type();
      if (values.count(a.text))
        throw DiagnosticError(a.loc, "value %" + a.text + " is defined twice");
      Value* arg = f.add_argument(a.text, std::move(t));
      values[a.text] = {arg};
      if (is_keyword("buffer")) {
        advance();
        Buffer b;
        parse_attr_value(b);
        arg->set_buffer(b);
      }
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
  }
  expect(Tok::r_paren, "')'");
  expect(Tok::arrow, "'->'");
  f.set_result_types(parse_type_list());
  if (is_keyword("attributes")) {
    advance();
    FunctionInfo info;
    parse_attr_value(info);
    f.set_info(info);
  }
  expect(Tok::l_brace, "'{'");
  while (cur_.kind != Tok::r_brace) {
    if (cur_.kind == Tok::eof)
      error("unexpected end of input inside @" + f.name());
    parse_op(m, f, values);
  }
  advance();
}

auto Parser::parse_type_list() -> std::vector<TensorType> {
  expect(Tok::l_paren, "'('");
  std::vector<TensorType> ts;
  if (cur_.kind != Tok::r_paren) {
    while (true) {
      ts.push_back(parse_type());
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
  }
  expect(Tok::r_paren, "')'");
  return ts;
}

auto Parser::parse_op(Module&, Function& f, std::map<std::string, std::vector<Value*>>& values)
    -> void {
  Token res;
  std::int64_t declared_results = -1;
  if (cur_.kind == Tok::percent_id) {
    res = cur_;
    advance();
    if (cur_.kind == Tok::colon) {
      advance();
      declared_results = parse_int();
      if (declared_results < 1)
        throw DiagnosticError(res.loc, "result count must be >= 1");
    } else {
      declared_results = 1;
    }
    expect(Tok::equal, "'='");
  }
  const Token name = expect(Tok::string, "an op name in quotes, e.g. \"top.MatMul\"");
  auto kind = parse_op_name(name.text);
  if (!kind)
    throw DiagnosticError(name.loc, "unknown op '" + name.text + "'");
  OpVariant op = make_op(*kind);
  // operands
  expect(Tok::l_paren, "'('");
  std::vector<Value*> operands;
  std::vector<Location> operand_locs;
  if (cur_.kind != Tok::r_paren) {
    while (true) {
      const Token u = expect(Tok::percent_id, "an operand (%name)");
      std::int64_t idx = 0;
      if (cur_.kind == Tok::hash) {
        advance();
        idx = parse_int();
      }
      auto it = values.find(u.text);
      if (it == values.end())
        throw DiagnosticError(u.loc, "use of undefined value %" + u.text);
      if (idx < 0 || idx >= static_cast<std::int64_t>(it->second.size()))
        throw DiagnosticError(u.loc, "value %" + u.text + " has no result #" + std::to_string(idx));
      operands.push_back(it->second[idx]);
      operand_locs.push_back(u.loc);
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
  }
  expect(Tok::r_paren, "')'");
  if (cur_.kind == Tok::l_brace)
    parse_attrs(op, name.text);
  expect(Tok::colon, "':' before the op's type");
  const Location types_loc = cur_.loc;
  auto in_types = parse_type_list();
  if (in_types.size() != operands.size())
    throw DiagnosticError(types_loc, "'" + name.text + "' lists " +
                                         std::to_string(in_types.size()) + " operand types for " +
                                         std::to_string(operands.size()) + " operands");
  for (std::size_t i = 0; i < operands.size(); ++i)
    if (!(in_types[i] == operands[i]->type()))
      throw DiagnosticError(operand_locs[i], "operand #" + std::to_string(i) + " has type " +
                                                 operands[i]->type().str() + " but the op lists " +
                                                 in_types[i].str());
  expect(Tok::arrow, "'->'");
  std::vector<TensorType> out_types;
  if (cur_.kind == Tok::l_paren)
    out_types = parse_type_list();
  else
    out_types.push_back(parse_type());
  const std::int64_t have = static_cast<std::int64_t>(out_types.size());
  if (declared_results < 0 && have != 0)
    throw DiagnosticError(name.loc, "'" + name.text + "' has " + std::to_string(have) +
                                        " results but names none");
  if (declared_results >= 0 && have != declared_results)
    throw DiagnosticError(res.loc, "%" + res.text + " names " + std::to_string(declared_results) +
                                       " results but the op lists " + std::to_string(have));
  std::optional<OpPlan> plan;
  if (is_keyword("plan")) {
    advance();
    plan.emplace();
    parse_attr_value(*plan);
  }
  std::vector<std::optional<Buffer>> buffers;
  Location buffers_loc;
  if (is_keyword("buffers")) {
    buffers_loc = cur_.loc;
    advance();
    expect(Tok::l_square, "'['");
    while (cur_.kind != Tok::r_square) {
      if (is_keyword("none")) {
        advance();
        buffers.emplace_back();
      } else {
        Buffer b;
        parse_attr_value(b);
        buffers.emplace_back(b);
      }
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
    expect(Tok::r_square, "']'");
    if (buffers.size() != out_types.size())
      throw DiagnosticError(buffers_loc, "'" + name.text + "' lists " +
                                             std::to_string(buffers.size()) + " buffers for " +
                                             std::to_string(out_types.size()) + " results");
  }
  auto* o = f.append(std::make_unique<Operation>(std::move(op), operands, out_types, name.loc));
  o->set_plan(std::move(plan));
  for (std::size_t r = 0; r < buffers.size(); ++r)
    o->result(r)->set_buffer(buffers[r]);
  if (declared_results > 0) {
    if (values.count(res.text))
      throw DiagnosticError(res.loc, "value %" + res.text + " is defined twice");
    auto& slot = values[res.text];
    for (std::size_t r = 0; r < o->num_results(); ++r)
      slot.push_back(o->result(r));
  }
}

auto Parser::parse_attrs(OpVariant& op, const std::string& opname) -> void {
  expect(Tok::l_brace, "'{'");
  std::vector<std::string> seen;
  if (cur_.kind != Tok::r_brace) {
    while (true) {
      const Token key = expect(Tok::bare_id, "an attribute name");
      expect(Tok::equal, "'='");
      if (std::find(seen.begin(), seen.end(), key.text) != seen.end())
        throw DiagnosticError(key.loc, "attribute '" + key.text + "' given twice");
      seen.push_back(key.text);
      bool found = false;
      visit_op(op, [&](auto& o) {
        using T = std::decay_t<decltype(o)>;
        T::attrs(o, [&](const char* n, auto& member) {
          if (!found && key.text == n) {
            found = true;
            parse_attr_value(member);
          }
        });
      });
      if (!found)
        throw DiagnosticError(key.loc, "'" + opname + "' has no attribute '" + key.text + "'");
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
  }
  expect(Tok::r_brace, "'}'");
}

auto Parser::parse_attr_value(bool& v) -> void {
  const Token t = expect(Tok::bare_id, "true or false");
  if (t.text != "true" && t.text != "false")
    throw DiagnosticError(t.loc, "expected true or false, got '" + t.text + "'");
  v = t.text == "true";
}

auto Parser::parse_attr_value(std::int64_t& v) -> void {
  v = parse_int();
  if (cur_.kind == Tok::colon) { // the `: i64` suffix is optional
    advance();
    expect_keyword("i64");
  }
}

auto Parser::parse_attr_value(float& v) -> void {
  const Token t = cur_;
  if (t.kind == Tok::integer || t.kind == Tok::floating) {
    advance();
    auto r = std::from_chars(t.text.data() + (t.text[0] == '+'), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc())
      throw DiagnosticError(t.loc, "'" + t.text + "' is not a representable f32");
  } else if (t.kind == Tok::bare_id && (t.text == "inf" || t.text == "nan")) {
    advance();
    v = t.text == "inf" ? std::numeric_limits<float>::infinity()
                        : std::numeric_limits<float>::quiet_NaN();
  } else {
    error("expected a floating-point number");
  }
  if (cur_.kind == Tok::colon) { // the `: f32` suffix is optional
    advance();
    expect_keyword("f32");
  }
}

auto Parser::parse_attr_value(std::vector<std::int64_t>& v) -> void {
  expect(Tok::l_square, "'['");
  v.clear();
  if (cur_.kind != Tok::r_square) {
    while (true) {
      v.push_back(parse_int());
      if (cur_.kind != Tok::comma)
        break;
      advance();
    }
  }
  expect(Tok::r_square, "']'");
}

auto Parser::parse_attr_value(DType& v) -> void {
  const Token t = expect(Tok::bare_id, "an element type");
  auto d = parse_dtype(t.text);
  if (!d)
    throw DiagnosticError(t.loc, "unknown element type '" + t.text + "'");
  v = *d;
}

auto Parser::parse_int() -> std::int64_t {
  const Token t = cur_;
  if (t.kind != Tok::integer)
    error("expected an integer");
  advance();
  std::int64_t v = 0;
  auto r = std::from_chars(t.text.data() + (t.text[0] == '+'), t.text.data() + t.text.size(), v);
  if (r.ec != std::errc())
    throw DiagnosticError(t.loc, "integer '" + t.text + "' is out of range");
  return v;
}

auto Parser::expect(Tok k, const std::string& what) -> Token {
  if (cur_.kind != k)
    error("expected " + what);
  Token t = cur_;
  advance();
  return t;
}

Module parse_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = path == "-" ? read_stdin() : read_regular_file(path);
  } catch (const Error& e) {
    throw DiagnosticError(Location{path == "-" ? "<stdin>" : path.string()}, e.message());
  }
  return parse_module(text, path == "-" ? "<stdin>" : path.string());
}

} // namespace tpullm::ir::text
