#!/usr/bin/env python3
# Writes the engine cases (small templates over small contexts, each exercising one piece of the
# Jinja subset) and their renders by Python Jinja2, set up exactly as
# ../shared/tokoracle/chat_oracle_jinja2.py sets it up (transformers' apply_chat_template
# environment). Usage: chat_oracle_engine.py CASES.json EXPECTED.jsonl
import json, sys, datetime
import jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

cases_path, out_path = sys.argv[1:3]

def raise_exception(msg): raise jinja2.exceptions.TemplateError(msg)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)

CTX = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "t": True, "z": None, "e": "", "l": [3, 1, 2],
       "d": {"b": 1, "a": [1, 2.0, None, True, "x"], "c": {"k": "v"}},
       "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo", "extra": None}, {"role": "user", "content": "bye"}],
       "u": "日本語 café 🙂"}

C = [
    # output and Python str() of values
    ("print_values", "{{ n }}|{{ f }}|{{ t }}|{{ z }}|{{ e }}|{{ l }}|{{ d }}|{{ missing }}"),
    ("print_floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 123456789012345678.0 }} {{ 0.0001 }} {{ 1 / 3 }} {{ -2.5e-7 }}"),
    ("print_repr_strings", "{{ ['it\\'s', \"a\\nb\", 'q\"', 'tab\\t', 'back\\\\', 'x\\x01', u] }}"),
    ("string_escapes", "{{ 'a\\tb\\\\c\\'d\\u00e9\\x41' }}|{{ \"dq\\\"\" }}|{{ 'adj' 'acent' }}"),
    # arithmetic and operators
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 1 + 2.5 }} {{ 3 * 2.0 }} {{ -n }} {{ +n }}"),
    ("arith_bool", "{{ true + 1 }} {{ 1 == true }} {{ 0 == false }} {{ 1.0 == 1 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ missing ~ [1] }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ l + [9] }}|{{ 'x' + 'y' }}"),
    ("compare", "{{ 3 > 2.5 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 2 <= 2 }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 'a' != 'a' }} {{ none == none }} {{ missing == none }}"),
    ("in_ops", "{{ 'ell' in s }} {{ 'zz' not in s }} {{ 2 in l }} {{ 'b' in d }} {{ 'v' in d }} {{ 5 not in l }}"),
    ("logic", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ not e }}|{{ not n }}|{{ none or none }}|{{ (1 and 0) or [] }}"),
    ("ternary", "{{ 'yes' if t else 'no' }}|{{ 'yes' if z else 'no' }}|{{ 'only' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}"),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ l|length - 1 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ (1 + 2) }} {{ not missing is defined }} {{ 2 * 3 ~ 4 }}"),
    ("err_concat_binds_tighter_than_plus", "{{ 'a' ~ 1 + 2 }}"),
    # subscripts, slices, attributes
    ("subscripts", "{{ l[0] }} {{ l[-1] }} {{ l[10] }}|{{ d['b'] }} {{ d.b }} {{ d.c.k }} {{ d['c']['k'] }} {{ d.zz }}|{{ s[2] }} {{ u[0] }} {{ l.0 }}"),
    ("slices", "{{ l[::-1] }} {{ l[1:] }} {{ l[:1] }} {{ l[-2:] }} {{ l[::2] }} {{ l[5:] }} {{ s[2:7] }} {{ u[::-1] }} {{ u[1:5] }} {{ msgs[1:][0].role }} {{ l[1:-1] }} {{ l[-1:0:-1] }}"),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list|length }}|{{ d.get('b') }} {{ d.get('q') }} {{ d.get('q', 5) }}"),
    ("none_attribute", "{{ z.a }}|{{ z.a is defined }}|{{ msgs[2].extra.x is defined }}"),
    # tests
    ("tests", "{{ n is number }} {{ t is number }} {{ s is string }} {{ l is iterable }} {{ d is mapping }} {{ l is mapping }} {{ z is none }} {{ missing is undefined }} {{ missing is defined }} {{ s is sequence }} {{ n is sequence }} {{ t is true }} {{ 1 is true }} {{ false is false }} {{ n is integer }} {{ f is float }} {{ t is boolean }}"),
    ("tests_more", "{{ missing is iterable }} {{ n is odd }} {{ 4 is even }} {{ 9 is divisibleby(3) }} {{ 9 is divisibleby 4 }} {{ z is not none }} {{ n is not string }} {{ 2 is in(l) }} {{ s is lower }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 3 is eq(3) }} {{ 3 is gt 2 }} {{ z is sameas none }}"),
    # filters
    ("f_trim", "[{{ s|trim }}][{{ '\\n\\t x \\u3000'|trim }}][{{ 'xxhixx'|trim('x') }}][{{ n|trim }}]"),
    ("f_tojson", "{{ d|tojson }}|{{ l|tojson }}|{{ u|tojson }}|{{ 'q\"\\\\\\n\\x01'|tojson }}|{{ {}|tojson }}|{{ []|tojson }}|{{ 1.0|tojson }}|{{ z|tojson }}"),
    ("f_tojson_indent", "{{ d|tojson(indent=2) }}|{{ {'e': {}, 'l': []}|tojson(indent=4) }}|{{ d|tojson(sort_keys=true) }}|{{ u|tojson(ensure_ascii=true) }}"),
    ("f_items_length", "{% for k, v in d|items %}{{ k }}:{{ v|length if v is iterable else v }},{% endfor %}|{{ s|length }} {{ u|length }} {{ d|length }} {{ missing|length }} {{ l|count }}"),
    ("f_join", "{{ l|join(', ') }}|{{ l|join }}|{{ msgs|join('/', attribute='role') }}|{{ [1, none, 'a']|join('-') }}"),
    ("f_select", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ [0, 1, '', 'a', none]|select|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ msgs|selectattr('extra', 'defined')|list|length }}|{{ msgs|selectattr('extra')|list|length }}"),
    ("f_map", "{{ msgs|map(attribute='role')|list }}|{{ ['a', 'B']|map('upper')|join }}|{{ msgs|map(attribute='nope', default='-')|join }}"),
    ("f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ []|first }}|{{ msgs|first|tojson }}"),
    ("f_case_string", "{{ 'hello world'|upper }} {{ 'HeLLo'|lower }} {{ 'hello wORLD'|title }} {{ 'hELLO'|capitalize }} {{ 12|string ~ 'x' }} {{ none|string }} {{ l|string }} {{ s|safe }}"),
    ("f_int_default", "{{ '42'|int }} {{ ' -7 '|int }} {{ '3.9'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 2.7|int }} {{ true|int }} {{ 'ff'|int(base=16) }}|{{ missing|default('dflt') }} {{ e|default('dflt') }} {{ e|default('dflt', true) }} {{ z|default('d') }} {{ missing|d(1) }}"),
    ("f_list_reverse", "{{ 'abc'|list }} {{ d|list }} {{ l|reverse|list }} {{ 'abc'|reverse }} {{ 'a-b'|replace('-', '+') }}"),
    # string methods
    ("str_methods", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ '\\n\\nx\\n'.strip('\\n') }}][{{ 'xyhiyx'.strip('xy') }}][{{ 'aXbXc'.split('X') }}][{{ ' a  b '.split() }}][{{ 'a,b,c'.split(',', 1) }}][{{ 'a,b,c'.split(',')[-1] }}]"),
    ("str_methods2", "{{ s.startswith('  He') }} {{ s.endswith('d  ') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'hi there'.title() }} {{ 'Hi'.upper() }} {{ 'Hi'.lower() }} {{ ', '.join(['a', 'b']) }} {{ 'banana'.find('na') }} {{ 'banana'.count('a') }} {{ 'x'.find('y') }}"),
    ("think_split", "{% set c = '<think>\\nr1\\n</think>\\n\\nanswer' %}[{{ c.split('</think>')[-1].lstrip('\\n') }}][{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]"),
    # statements and scoping
    ("for_loop_vars", "{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}"),
    ("for_prev_next", "{% for x in l %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}"),
    ("for_filter_else", "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }};{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for x in missing %}x{% endfor %}"),
    ("for_unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }};{% endfor %}|{% for k, v in d.items() if k != 'a' %}{{ k }};{% endfor %}"),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in ['x', 'y'] %}{{ loop.index }}{{ a }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}"),
    ("scoping_set_in_for", "{% set x = 'outer' %}{% for i in l %}{% set x = i %}{{ x }}{% endfor %}|{{ x }}|{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}"),
    ("scoping_set_in_if", "{% if true %}{% set x = 'inner' %}{% endif %}{{ x }}"),
    ("namespace", "{% set ns = namespace(c=0, last='', flag=true) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.c = ns.c + 1 %}{% set ns.last = m.content %}{% endif %}{% endfor %}{{ ns.c }} {{ ns.last }} {{ ns.flag }} {{ ns.nope is defined }}"),
    ("break_continue", "{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %};{% endfor %}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 'x') %}{{ t[1] }}|{% set blk %}B{{ n }}{% endset %}{{ blk }}|{% set lst = [1, [2, 3], {'k': 'v'}] %}{{ lst[1][0] }}{{ lst[2].k }}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', '?') }} {{ greet(name='Cy', punct='.') }}"),
    ("macro_scope", "{% set top = 'T' %}{% macro m(x) %}{{ top }}{{ x }}{% set top = 'changed' %}{{ top }}{% endmacro %}{{ m(1) }}{{ top }}"),
    ("range_builtin", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}{% for i in range(2) %}.{{ i }}{% endfor %}"),
    ("dict_literal", "{{ {'b': 1, 'a': 2}|tojson }} {{ {'b': 1, 'a': 2} }} {{ dict(x=1, y='z')|tojson }}"),
    # whitespace control, trim_blocks, lstrip_blocks, comments
    ("ws_trim_blocks", "{% if true %}\nline\n{% endif %}\nafter\n"),
    ("ws_lstrip_blocks", "start\n    {% if true %}\n    kept indent\n    {% endif %}\nend"),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c\n  {{- ' d ' -}}  \n e"),
    ("ws_plus", "x\n    {%+ if true +%}\ny\n{% endif %}z"),
    ("ws_var_not_stripped", "  {{ 'v' }}\n  {{ 'w' }}  \n"),
    ("ws_comments", "a\n  {# comment #}\nb{#- c -#}   c {# multi\nline #}\nd"),
    ("ws_unicode_space", "a\u3000{%- if true -%}\u3000\u00a0b\n\u3000{% if true %}\nc{% endif %}{% endif %}"),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"),
    ("ws_trailing_newline", "text\n\n"),
    ("ws_mid_line_tag", "a {% if true %}b{% endif %} c\n{% for x in l %} {{ x }} {% endfor %}\n"),
    # constructs other families' templates use (written here, not copied)
    ("system_first_pop", "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content']|trim %}{% set rest = msgs[1:] %}{% else %}{% set sys = none %}{% set rest = msgs %}{% endif %}[{{ sys }}]{% for m in rest %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('alternate') }}{% endif %}{{ '[U] ' if m.role == 'user' else '[A] ' }}{{ m['content'] }}{{ ' ' if not loop.last }}{% endfor %}"),
    ("args_items_tojson", "{% set call = {'name': 'f', 'arguments': {'city': 'Paris', 'days': 3, 'opts': {'u': 'C'}}} %}{% for k, v in call.arguments|items %}{{ k }}={{ v|tojson }}{{ ', ' if not loop.last }}{% endfor %}|{{ call|tojson(indent=4) }}"),
    ("selectattr_first", "{{ (msgs|selectattr('role', 'equalto', 'user')|first).content }}|{{ (msgs|selectattr('role', 'equalto', 'tool')|first) is defined }}|{{ msgs|selectattr('role', 'in', ['system', 'assistant'])|map(attribute='content')|join(' ') }}"),
    ("default_none_chain", "{% set x = missing|default(none) %}{{ x is none }} {{ (d.nope or 'fallback') }} {{ d.get('c', {}).get('k') }} {{ '\n'.join(['a', 'b']) }}"),
    ("loop_last_index", "{% for m in msgs %}{% if loop.last and m.role == 'user' %}LAST:{{ m.content }}{% endif %}{% if not loop.first and msgs[loop.index0 - 1].role == 'user' %}>{% endif %}{% endfor %}"),
    # globals
    ("raise", "{% if n > 5 %}{{ raise_exception('n too big: ' ~ n) }}{% endif %}never"),
    ("strftime_type", "{{ strftime_now('%Y') is string }} {{ strftime_now('%Y')|length }}"),
    # errors Jinja2 raises at render time (ours must raise too)
    ("err_undefined_attr", "{{ missing.attr }}"),
    ("err_undefined_add", "{{ missing + 'x' }}"),
    ("err_str_plus_int", "{{ 'a' + 1 }}"),
    ("err_none_in", "{{ 'x' in z }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_call_undefined", "{{ nofunc(1) }}"),
    ("err_not_callable", "{{ n() }}"),
    ("err_items_of_list", "{{ l|items|list }}"),
    ("err_tojson_undefined", "{{ missing|tojson }}"),
    ("err_attr_of_missing_key", "{{ d.zz.k }}"),
    ("err_set_attr_non_ns", "{% set d.x = 1 %}"),
    ("err_length_of_int", "{{ n|length }}"),
    ("err_iterate_int", "{% for x in n %}{% endfor %}"),
]

with open(cases_path, "w") as f:
    json.dump({"context": CTX, "cases": [{"name": n, "template": t} for n, t in C]}, f, ensure_ascii=False, indent=1)
    f.write("\n")
with open(out_path, "w") as f:
    for name, src in C:
        rec = {"name": name}
        try:
            rec["text"] = env.from_string(src).render(**json.loads(json.dumps(CTX)))
        except Exception as e:
            rec["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
