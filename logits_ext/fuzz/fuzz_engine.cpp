// libFuzzer target for the constraint engine (src/engine.cpp, compiled into this file): the bytes are read as
// an engine (vocabulary, EOS ids, token strings) and a sequence of calls on it, the ones the Python binding
// exposes: compiling DFA / choice / n-gram / token-list constraints, rows set, moved, swapped and cleared, ids fed
// directly or through a live Python list that grows, shrinks, is rewritten and holds non-ints, then apply() on
// a float buffer and fill_bitmask() on a word buffer, each exactly as large as the call says.
//
// The property: a call either works or throws what the binding turns into ValueError/IndexError (or a Python
// error it raised itself); never an ASan/UBSan report, never a write outside the buffers, never a Python error
// left set without being raised (pybind11 would turn that into a SystemError later). Build and run:
// logits_ext/fuzz/run.sh.
#include <pybind11/embed.h>

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../src/engine.cpp"

namespace {

constexpr int kMaxOps = 48;
constexpr size_t kMaxRows = 8;  // the engine allows 2^20; a few slots reach every move/swap/clear path
constexpr float kPoison = 12345.0f;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property broken: %s\n", what);
    std::abort();
  }
}

std::vector<Tok> tokens(FuzzedDataProvider& in, int vocab, size_t most) {
  std::vector<Tok> out(in.ConsumeIntegralInRange<size_t>(0, most));
  for (auto& t : out) t = in.ConsumeIntegralInRange<Tok>(-2, vocab + 2);
  return out;
}

py::bytes some_bytes(FuzzedDataProvider& in, size_t most) {
  return py::bytes(in.ConsumeRandomLengthString(most));
}

py::object list_item(FuzzedDataProvider& in, int vocab) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return py::int_(-1);  // async scheduling's placeholder
    case 1: return py::reinterpret_steal<py::object>(PyLong_FromLongLong(1LL << 40));
    case 2: return py::str("x");
    default: return py::int_(in.ConsumeIntegralInRange<int>(0, vocab));
  }
}

void run(FuzzedDataProvider& in) {
  const int vocab = in.ConsumeIntegralInRange<int>(-1, 300);
  std::vector<Tok> eos = tokens(in, vocab, 3);
  std::vector<py::bytes> token_bytes;
  if (in.ConsumeBool()) {
    const int n = in.ConsumeIntegralInRange<int>(0, std::max(vocab, 0) + 1);
    for (int i = 0; i < n; ++i) token_bytes.push_back(some_bytes(in, 4));
  }
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(vocab, eos, token_bytes);
  } catch (const std::invalid_argument&) {
    return;
  }
  std::vector<py::list> lists;  // the live output-id lists rows read
  for (int op = 0; op < kMaxOps && in.remaining_bytes() > 0; ++op) {
    const size_t row = in.ConsumeIntegralInRange<size_t>(0, kMaxRows);
    try {
      switch (in.ConsumeIntegralInRange<int>(0, 13)) {
        case 0: {
          const int32_t n = in.ConsumeIntegralInRange<int32_t>(-1, 16);
          const int32_t start = in.ConsumeIntegralInRange<int32_t>(-1, n);
          std::vector<std::array<int64_t, 3>> tr(in.ConsumeIntegralInRange<size_t>(0, 32));
          for (auto& t : tr)
            t = {in.ConsumeIntegralInRange<int64_t>(-1, n), in.ConsumeIntegralInRange<int64_t>(-1, vocab),
                 in.ConsumeIntegralInRange<int64_t>(-1, n)};
          std::vector<int32_t> accept(in.ConsumeIntegralInRange<size_t>(0, 4));
          for (auto& a : accept) a = in.ConsumeIntegralInRange<int32_t>(-1, n);
          engine->add_dfa("dfa" + std::to_string(op), start, n, tr, accept);
          break;
        }
        case 1: {
          std::vector<py::bytes> choices(in.ConsumeIntegralInRange<size_t>(0, 4), py::bytes(""));
          for (auto& c : choices) c = some_bytes(in, 8);
          engine->add_choice("choice" + std::to_string(op), choices);
          break;
        }
        case 2: {
          std::vector<std::vector<Tok>> grams(in.ConsumeIntegralInRange<size_t>(0, 4));
          for (auto& g : grams) g = tokens(in, vocab, 4);
          engine->add_ngram("ngram" + std::to_string(op), grams, in.ConsumeIntegralInRange<int32_t>(-1, 4));
          break;
        }
        case 3:
          engine->add_tokens("tokens" + std::to_string(op), tokens(in, vocab, 8), in.ConsumeBool());
          break;
        case 4: {
          const int handle = in.ConsumeIntegralInRange<int>(-1, static_cast<int>(engine->num_constraints()));
          py::object src = py::none();
          if (in.ConsumeBool()) {
            py::list ids;
            for (Tok t : tokens(in, vocab, 6)) ids.append(t);
            lists.push_back(ids);
            src = ids;
          }
          engine->set_row(row, handle, src);
          break;
        }
        case 5: engine->clear_row(row); break;
        case 6: engine->move_row(row, in.ConsumeIntegralInRange<size_t>(0, kMaxRows)); break;
        case 7: engine->swap_rows(row, in.ConsumeIntegralInRange<size_t>(0, kMaxRows)); break;
        case 8: engine->feed(row, tokens(in, vocab, 8)); break;
        case 9: {  // the engine reads these lists on its next sync: grow, shrink or rewrite one
          if (lists.empty()) break;
          py::list& ids = lists[in.ConsumeIntegralInRange<size_t>(0, lists.size() - 1)];
          const int how = in.ConsumeIntegralInRange<int>(0, 2);
          const auto len = static_cast<Py_ssize_t>(ids.size());
          if (how == 0 || len == 0) {
            ids.append(list_item(in, vocab));
          } else if (how == 1) {
            require(PySequence_DelItem(ids.ptr(), len - 1) == 0, "list pop");
          } else {
            ids[in.ConsumeIntegralInRange<Py_ssize_t>(0, len - 1)] = list_item(in, vocab);
          }
          break;
        }
        case 10: {
          for (Tok t : engine->allowed(row)) require(t >= 0 && t < vocab, "allowed() returned an id outside the vocab");
          break;
        }
        case 11: {
          const size_t n_rows = in.ConsumeIntegralInRange<size_t>(0, kMaxRows);
          const size_t width = static_cast<size_t>(vocab) + in.ConsumeIntegralInRange<size_t>(0, 3) -
                               (in.ConsumeBool() && in.ConsumeBool() ? 1 : 0);
          const size_t stride = width + in.ConsumeIntegralInRange<size_t>(0, 3);
          std::vector<int64_t> slots;
          if (in.ConsumeBool()) {
            slots.resize(n_rows + (in.ConsumeBool() && in.ConsumeBool() ? 1 : 0));
            for (auto& s : slots) s = in.ConsumeIntegralInRange<int64_t>(-1, kMaxRows + 1);
          }
          // exactly the rows the call covers (the last row needs only `width`), and a poisoned gap between rows
          std::vector<float> logits(n_rows == 0 ? 0 : (n_rows - 1) * stride + width, kPoison);
          engine->apply(reinterpret_cast<uintptr_t>(logits.data()), n_rows, width, stride, slots, 1);
          for (size_t i = 0; i + 1 < n_rows; ++i)
            for (size_t j = width; j < stride; ++j)
              require(logits[i * stride + j] == kPoison, "apply() wrote between two rows");
          break;
        }
        case 12: {
          const size_t n_rows = in.ConsumeIntegralInRange<size_t>(0, kMaxRows);
          const size_t words = (static_cast<size_t>(vocab) + 31) / 32 + in.ConsumeIntegralInRange<size_t>(0, 1) -
                               (in.ConsumeBool() && in.ConsumeBool() ? 1 : 0);
          std::vector<int64_t> slots;
          if (in.ConsumeBool()) {
            slots.resize(n_rows);
            for (auto& s : slots) s = in.ConsumeIntegralInRange<int64_t>(-1, kMaxRows + 1);
          }
          std::vector<uint32_t> mask(n_rows * words);
          engine->fill_bitmask(reinterpret_cast<uintptr_t>(mask.data()), n_rows, words, slots, 1);
          break;
        }
        case 13: engine->restart(row, tokens(in, vocab, 8)); break;
      }
    } catch (const std::invalid_argument&) {
    } catch (const std::out_of_range&) {
    } catch (py::error_already_set& e) {
      e.restore();  // what the binding raises in Python: a TypeError/OverflowError of a list item
      PyErr_Clear();
    }
    require(PyErr_Occurred() == nullptr, "a Python error was left set without being raised");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  new py::scoped_interpreter();  // for the life of the process: the rows' id lists are Python lists
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  run(in);
  return 0;
}
