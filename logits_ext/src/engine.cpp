// Batched constraint state machines for LLM decoding (C++17 + pybind11).
//
// One Engine per logits processor. Constraints are compiled once per distinct spec (the Python
// layer validates the JSON and passes a canonical key) and shared by every row that uses them.
// Each batch row holds a constraint, its state, and optionally a live reference to the request's
// output-token list; apply() syncs new real ids from those lists (GIL held, cheap), then advances
// states and writes the masks into the float32 logits rows on OpenMP threads with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace py = pybind11;
using Tok = int32_t;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// A scattered single-float write costs roughly this many sequential float writes (a cache line
// touched per id); a row is written as "ban these ids" only when that beats one fill of the row.
constexpr size_t kScatterCost = 8;

// Batches bigger than this are not expected to stay in cache until the sampler reads them: fill rows
// with streaming stores, which skip the read-for-ownership and halve the DRAM traffic of the fill.
// Below this many logits, one thread is quicker than a parallel region.
constexpr size_t kParallelMinElems = size_t(1) << 16;
constexpr size_t kStreamBytes = size_t(32) << 20;

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx2", "default")))  // wider stores where the CPU has them
#endif
void fill_neg_inf(float* p, size_t n, bool stream) {
#if defined(__SSE2__)
  if (stream) {
    size_t i = 0;
    for (; i < n && (reinterpret_cast<uintptr_t>(p + i) & 15); ++i) p[i] = kNegInf;
    const __m128 v = _mm_set1_ps(kNegInf);
    for (; i + 4 <= n; i += 4) _mm_stream_ps(p + i, v);
    for (; i < n; ++i) p[i] = kNegInf;
    _mm_sfence();  // order the streaming stores before the restores and before other threads read
    return;
  }
#endif
  (void)stream;
  std::fill(p, p + n, kNegInf);
}

struct Mask {
  enum Mode : uint8_t { NONE = 0, ALLOW = 1, BAN = 2 };
  Mode mode = NONE;
  std::vector<Tok> ids;  // sorted, unique, all < vocab
};

// Choose the cheaper representation of an allowed set for a row of width `vocab`.
Mask make_mask(std::vector<Tok> allowed, int vocab) {
  std::sort(allowed.begin(), allowed.end());
  allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
  Mask m;
  size_t banned = static_cast<size_t>(vocab) - allowed.size();
  if (banned == 0) return m;
  if (banned * kScatterCost < static_cast<size_t>(vocab)) {
    m.mode = Mask::BAN;
    m.ids.reserve(banned);
    size_t j = 0;
    for (Tok t = 0; t < vocab; ++t) {
      if (j < allowed.size() && allowed[j] == t) { ++j; continue; }
      m.ids.push_back(t);
    }
  } else {
    m.mode = Mask::ALLOW;
    m.ids = std::move(allowed);
  }
  return m;
}

struct RowState {
  int32_t node = 0;
  bool dead = false;          // a token outside the constraint was consumed: only EOS remains
  std::vector<Tok> tail;      // n-gram kinds: the last (max_n - 1) tokens
  int32_t run = 0;            // n-gram kinds: length of the current run of `last`
  Tok last = -1;
};

class Constraint {
 public:
  virtual ~Constraint() = default;
  virtual void reset(RowState& s) const {
    s = RowState{};
    s.node = start_;
  }
  virtual void advance(RowState& s, Tok t) const = 0;
  // The row's mask; dynamic kinds build it in `scratch` and return that.
  virtual const Mask& mask(const RowState& s, Mask& scratch) const = 0;

 protected:
  int32_t start_ = 0;
};

// Token DFA: also the compiled form of "one of these strings" (a trie over token paths).
class Dfa final : public Constraint {
 public:
  Dfa(int vocab, const std::vector<Tok>& eos, int32_t start, int32_t n_states,
      const std::vector<std::array<int64_t, 3>>& transitions, const std::vector<int32_t>& accept) {
    if (n_states <= 0) throw std::invalid_argument("dfa: needs at least one state");
    if (start < 0 || start >= n_states) throw std::invalid_argument("dfa: start state out of range");
    start_ = start;
    next_.resize(n_states);
    accept_.assign(n_states, false);
    for (auto a : accept) {
      if (a < 0 || a >= n_states) throw std::invalid_argument("dfa: accept state out of range");
      accept_[a] = true;
    }
    for (const auto& tr : transitions) {
      if (tr[0] < 0 || tr[0] >= n_states || tr[2] < 0 || tr[2] >= n_states)
        throw std::invalid_argument("dfa: transition state out of range");
      if (tr[1] < 0 || tr[1] >= vocab) throw std::invalid_argument("dfa: transition token out of range");
      auto& m = next_[tr[0]];
      auto it = m.find(static_cast<Tok>(tr[1]));
      if (it != m.end() && it->second != tr[2])
        throw std::invalid_argument("dfa: token " + std::to_string(tr[1]) + " leaves state " +
                                    std::to_string(tr[0]) + " to two different states");
      m[static_cast<Tok>(tr[1])] = static_cast<int32_t>(tr[2]);
    }
    masks_.resize(n_states);
    for (int32_t s = 0; s < n_states; ++s) {
      std::vector<Tok> allowed;
      for (const auto& kv : next_[s]) allowed.push_back(kv.first);
      if (accept_[s]) allowed.insert(allowed.end(), eos.begin(), eos.end());
      if (allowed.empty())
        throw std::invalid_argument("dfa: state " + std::to_string(s) +
                                    " has no transitions and is not accepting (a dead end)");
      masks_[s] = make_mask(std::move(allowed), vocab);
    }
    dead_ = make_mask(eos, vocab);
  }
  void advance(RowState& s, Tok t) const override {
    if (s.dead) return;
    const auto& m = next_[s.node];
    auto it = m.find(t);
    if (it == m.end()) {
      s.dead = true;
    } else {
      s.node = it->second;
    }
  }
  const Mask& mask(const RowState& s, Mask&) const override { return s.dead ? dead_ : masks_[s.node]; }

 private:
  std::vector<std::unordered_map<Tok, int32_t>> next_;
  std::vector<bool> accept_;
  std::vector<Mask> masks_;
  Mask dead_;
};

// Banned n-grams over generated tokens plus a cap on consecutive repeats of one token.
class NGram final : public Constraint {
 public:
  NGram(int vocab, const std::vector<std::vector<Tok>>& ngrams, int32_t max_repeat)
      : vocab_(vocab), max_repeat_(max_repeat) {
    if (max_repeat < 0) throw std::invalid_argument("ngram: max_repeat must be >= 0");
    for (const auto& g : ngrams) {
      if (g.empty()) throw std::invalid_argument("ngram: an n-gram must not be empty");
      for (Tok t : g)
        if (t < 0 || t >= vocab) throw std::invalid_argument("ngram: token " + std::to_string(t) + " out of range");
      std::vector<Tok> prefix(g.begin(), g.end() - 1);
      by_len_[g.size()][prefix].push_back(g.back());
      max_n_ = std::max(max_n_, g.size());
    }
  }
  void advance(RowState& s, Tok t) const override {
    if (t == s.last) {
      ++s.run;
    } else {
      s.last = t;
      s.run = 1;
    }
    if (max_n_ > 1) {
      s.tail.push_back(t);
      if (s.tail.size() > max_n_ - 1) s.tail.erase(s.tail.begin());
    }
  }
  const Mask& mask(const RowState& s, Mask& scratch) const override {
    scratch.ids.clear();
    for (const auto& [n, table] : by_len_) {
      if (n - 1 > s.tail.size()) continue;
      std::vector<Tok> key(s.tail.end() - static_cast<long>(n - 1), s.tail.end());
      auto it = table.find(key);
      if (it != table.end()) scratch.ids.insert(scratch.ids.end(), it->second.begin(), it->second.end());
    }
    // an id outside the vocabulary (fed by hand, or the state's initial -1) has no logit to ban
    if (max_repeat_ > 0 && s.run >= max_repeat_ && s.last >= 0 && s.last < vocab_) scratch.ids.push_back(s.last);
    std::sort(scratch.ids.begin(), scratch.ids.end());
    scratch.ids.erase(std::unique(scratch.ids.begin(), scratch.ids.end()), scratch.ids.end());
    scratch.mode = scratch.ids.empty() ? Mask::NONE : Mask::BAN;
    return scratch;
  }

 private:
  std::map<size_t, std::map<std::vector<Tok>, std::vector<Tok>>> by_len_;
  size_t max_n_ = 0;
  int vocab_;
  int32_t max_repeat_;
};

// Stateless allowed / banned token lists.
class Fixed final : public Constraint {
 public:
  explicit Fixed(Mask m) : mask_(std::move(m)) {}
  void advance(RowState&, Tok) const override {}
  const Mask& mask(const RowState&, Mask&) const override { return mask_; }

 private:
  Mask mask_;
};

// Calls f(0..n-1) on `threads` OpenMP threads (serially for small work or without OpenMP). There is
// one libgomp per process (found by its soname), so inside a torch process this is torch's own
// intra-op team: its threads are awake right after the forward pass, as they are for torch's fill_,
// where a private pool's threads would have to be woken (measured: 1.85x vs 1.13x the fill_ floor at
// 32 x 32000 on 2 cores), and it never adds threads that compete with torch's for the cores.
// Contiguous static chunks keep each thread on the rows it wrote last step, still in its own cache.
template <class F>
void parallel_rows(size_t n, size_t elems, int threads, const F& f) {
#if defined(_OPENMP)
  if (threads > 1 && n > 1 && elems >= kParallelMinElems) {
    const long m = static_cast<long>(n);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long i = 0; i < m; ++i) f(static_cast<size_t>(i));
    return;
  }
#else
  (void)elems;
  (void)threads;
#endif
  for (size_t i = 0; i < n; ++i) f(i);
}

struct Row {
  std::shared_ptr<const Constraint> c;
  RowState st;
  py::object src;          // live output-token list (None: tokens arrive through feed())
  size_t consumed = 0;     // real ids of `src` already in `st`
  long last_consumed = -1;  // src[consumed-1] when consumed: detects in-place rewrites
  bool reset = false;      // replay from scratch before advancing `pending`
  std::vector<Tok> pending;
};

class Engine {
 public:
  Engine(int vocab, std::vector<Tok> eos, std::vector<py::bytes> token_bytes)
      : vocab_(vocab), eos_(std::move(eos)) {
    if (vocab <= 0) throw std::invalid_argument("vocab_size must be positive");
    if (eos_.empty()) throw std::invalid_argument("at least one EOS token id is needed");
    for (Tok t : eos_)
      if (t < 0 || t >= vocab) throw std::invalid_argument("EOS id " + std::to_string(t) + " out of range");
    for (auto& b : token_bytes) token_bytes_.push_back(std::string(b));
    if (!token_bytes_.empty() && token_bytes_.size() > static_cast<size_t>(vocab))
      throw std::invalid_argument("more token strings than vocab_size");
  }

  int lookup(const std::string& key) const {
    auto it = cache_.find(key);
    return it == cache_.end() ? -1 : it->second;
  }
  int add_dfa(const std::string& key, int32_t start, int32_t n_states,
              const std::vector<std::array<int64_t, 3>>& transitions, const std::vector<int32_t>& accept) {
    return store(key, std::make_shared<Dfa>(vocab_, eos_, start, n_states, transitions, accept));
  }
  // "One of these strings": a trie over the strings' bytes walked together with every token's bytes,
  // so any tokenisation that spells a choice is allowed; a complete choice is an accepting state.
  int add_choice(const std::string& key, const std::vector<py::bytes>& choices) {
    if (token_bytes_.empty()) throw std::invalid_argument("choice: the engine was built without a vocabulary");
    if (choices.empty()) throw std::invalid_argument("choice: needs at least one string");
    std::vector<std::map<unsigned char, int32_t>> kids(1);
    std::vector<int32_t> accept;
    for (const auto& pb : choices) {
      std::string s(pb);
      if (s.empty()) throw std::invalid_argument("choice: strings must not be empty");
      int32_t n = 0;
      for (unsigned char ch : s) {
        auto it = kids[n].find(ch);
        if (it == kids[n].end()) {
          kids.push_back({});
          int32_t id = static_cast<int32_t>(kids.size() - 1);
          kids[n][ch] = id;
          n = id;
        } else {
          n = it->second;
        }
      }
      accept.push_back(n);
    }
    std::vector<std::array<int64_t, 3>> trans;
    for (Tok t = 0; t < static_cast<Tok>(token_bytes_.size()); ++t) {
      const std::string& tb = token_bytes_[t];
      if (tb.empty()) continue;
      for (int32_t n = 0; n < static_cast<int32_t>(kids.size()); ++n) {
        int32_t cur = n;
        for (unsigned char ch : tb) {
          auto it = kids[cur].find(ch);
          if (it == kids[cur].end()) { cur = -1; break; }
          cur = it->second;
        }
        if (cur >= 0) trans.push_back({n, t, cur});
      }
    }
    // A prefix no token can continue is a dead end: report it instead of stalling the request.
    try {
      return store(key, std::make_shared<Dfa>(vocab_, eos_, 0, static_cast<int32_t>(kids.size()), trans, accept));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("choice: the tokenizer's vocabulary cannot spell every choice to its end");
    }
  }
  int add_ngram(const std::string& key, const std::vector<std::vector<Tok>>& ngrams, int32_t max_repeat) {
    return store(key, std::make_shared<NGram>(vocab_, ngrams, max_repeat));
  }
  int add_tokens(const std::string& key, std::vector<Tok> ids, bool allow) {
    for (Tok t : ids)
      if (t < 0 || t >= vocab_) throw std::invalid_argument("token " + std::to_string(t) + " out of range");
    if (allow) {
      if (ids.empty()) throw std::invalid_argument("allow: the allowed set is empty");
      return store(key, std::make_shared<Fixed>(make_mask(std::move(ids), vocab_)));
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() >= static_cast<size_t>(vocab_)) throw std::invalid_argument("ban: every token is banned");
    std::vector<Tok> allowed;
    size_t j = 0;
    for (Tok t = 0; t < vocab_; ++t) {
      if (j < ids.size() && ids[j] == t) { ++j; continue; }
      allowed.push_back(t);
    }
    return store(key, std::make_shared<Fixed>(make_mask(std::move(allowed), vocab_)));
  }
  size_t num_constraints() const { return handles_.size(); }

  // ---- rows ----
  void set_row(size_t row, int handle, py::object src) {
    if (handle < 0 || static_cast<size_t>(handle) >= handles_.size()) throw std::out_of_range("unknown constraint handle");
    Row& r = at(row);
    r = Row{};
    r.c = handles_[handle];
    r.c->reset(r.st);
    r.src = std::move(src);
  }
  void clear_row(size_t row) {
    if (row < rows_.size()) rows_[row] = Row{};
  }
  void move_row(size_t from, size_t to) {
    if (from == to) return;
    Row tmp = std::move(at(from));
    at(to) = std::move(tmp);
    rows_[from] = Row{};
  }
  void swap_rows(size_t a, size_t b) {
    if (a == b) return;
    at(std::max(a, b));  // grow first: a reference from at() dangles if a later at() reallocates
    std::swap(rows_[a], rows_[b]);
  }
  bool has_row(size_t row) const { return row < rows_.size() && rows_[row].c != nullptr; }
  void feed(size_t row, const std::vector<Tok>& toks) {
    Row& r = checked(row);
    for (Tok t : toks) r.c->advance(r.st, t);
    r.consumed += toks.size();
  }
  size_t consumed(size_t row) { return checked(row).consumed; }
  std::vector<Tok> allowed(size_t row) {
    Row& r = checked(row);
    sync_one(r);
    settle(r);
    Mask scratch;
    const Mask& m = r.c->mask(r.st, scratch);
    std::vector<Tok> out;
    if (m.mode == Mask::ALLOW) return m.ids;
    size_t j = 0;
    for (Tok t = 0; t < vocab_; ++t) {
      if (m.mode == Mask::BAN && j < m.ids.size() && m.ids[j] == t) { ++j; continue; }
      out.push_back(t);
    }
    return out;
  }

  // Masks rows [0, n_rows) of a float32 [n_rows, width] buffer in place. Logits row i belongs to
  // engine row slots[i] (identity when `slots` is empty; -1 leaves the row alone). Returns how many
  // rows ended in an unpatched placeholder (-1), i.e. were masked for their last known state.
  size_t apply(uintptr_t ptr, size_t n_rows, size_t width, size_t row_stride, const std::vector<int64_t>& slots,
               int threads) {
    if (width < static_cast<size_t>(vocab_)) throw std::invalid_argument("logits narrower than the vocabulary");
    size_t stale = 0;
    std::vector<Row*> target = targets(n_rows, slots, stale);
    float* base = reinterpret_cast<float*>(ptr);
    const bool stream = n_rows * width * sizeof(float) >= kStreamBytes;
    auto body = [&](size_t i) {
      Row* r = target[i];
      if (!r) return;
      settle(*r);
      thread_local Mask scratch;
      thread_local std::vector<float> saved;
      const Mask& m = r->c->mask(r->st, scratch);
      float* row = base + i * row_stride;
      if (m.mode == Mask::BAN) {
        for (Tok t : m.ids) row[t] = kNegInf;
      } else if (m.mode == Mask::ALLOW) {
        saved.resize(m.ids.size());
        for (size_t k = 0; k < m.ids.size(); ++k) saved[k] = row[m.ids[k]];
        fill_neg_inf(row, width, stream);
        for (size_t k = 0; k < m.ids.size(); ++k) row[m.ids[k]] = saved[k];
      }
    };
    py::gil_scoped_release nogil;
    parallel_rows(n_rows, n_rows * width, threads, body);
    return stale;
  }

  // Packed allowed-bitmask (bit t%32 of word t/32 set = allowed) into int32 [n_rows, words]:
  // built here on the CPU, applied to device logits by one vectorised op on the Python side.
  size_t fill_bitmask(uintptr_t ptr, size_t n_rows, size_t words, const std::vector<int64_t>& slots, int threads) {
    if (words * 32 < static_cast<size_t>(vocab_)) throw std::invalid_argument("bitmask narrower than the vocabulary");
    size_t stale = 0;
    std::vector<Row*> target = targets(n_rows, slots, stale);
    uint32_t* base = reinterpret_cast<uint32_t*>(ptr);
    auto body = [&](size_t i) {
      uint32_t* w = base + i * words;
      Row* r = target[i];
      if (!r) {
        std::fill(w, w + words, 0xFFFFFFFFu);
        return;
      }
      settle(*r);
      thread_local Mask scratch;
      const Mask& m = r->c->mask(r->st, scratch);
      if (m.mode == Mask::ALLOW) {
        std::fill(w, w + words, 0u);
        for (Tok t : m.ids) w[t >> 5] |= (1u << (t & 31));
      } else {
        std::fill(w, w + words, 0xFFFFFFFFu);
        if (m.mode == Mask::BAN)
          for (Tok t : m.ids) w[t >> 5] &= ~(1u << (t & 31));
      }
    };
    py::gil_scoped_release nogil;
    parallel_rows(n_rows, n_rows * words, threads, body);
    return stale;
  }
  // Reset a row's state and consume `toks` (replay after preemption when ids come from elsewhere).
  void restart(size_t row, const std::vector<Tok>& toks) {
    Row& r = checked(row);
    r.c->reset(r.st);
    r.reset = false;
    r.pending.clear();
    r.consumed = 0;
    feed(row, toks);
  }

 private:
  int store(const std::string& key, std::shared_ptr<const Constraint> c) {
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    handles_.push_back(std::move(c));
    int h = static_cast<int>(handles_.size() - 1);
    cache_[key] = h;
    return h;
  }
  Row& at(size_t row) {
    if (row > (1u << 20)) throw std::out_of_range("row index too large");
    if (row >= rows_.size()) rows_.resize(row + 1);
    return rows_[row];
  }
  Row& checked(size_t row) {
    if (!has_row(row)) throw std::out_of_range("row " + std::to_string(row) + " has no constraint");
    return rows_[row];
  }
  // GIL held: resolve each logits row to its engine row and pull new real ids from live lists.
  std::vector<Row*> targets(size_t n_rows, const std::vector<int64_t>& slots, size_t& stale) {
    if (!slots.empty() && slots.size() != n_rows) throw std::invalid_argument("slots must have one entry per logits row");
    std::vector<Row*> out(n_rows, nullptr);
    for (size_t i = 0; i < n_rows; ++i) {
      int64_t s = slots.empty() ? static_cast<int64_t>(i) : slots[i];
      if (s < 0 || static_cast<size_t>(s) >= rows_.size() || !rows_[s].c) continue;
      out[i] = &rows_[s];
      if (!sync_one(rows_[s])) ++stale;
    }
    return out;
  }
  // Returns false when the list ends in an unpatched placeholder.
  bool sync_one(Row& r) {
    if (!r.src || r.src.is_none()) return true;
    PyObject* seq = PySequence_Fast(r.src.ptr(), "output token ids must be a sequence");
    if (!seq) throw py::error_already_set();
    py::object hold = py::reinterpret_steal<py::object>(seq);
    size_t len = static_cast<size_t>(PySequence_Fast_GET_SIZE(seq));
    PyObject** items = PySequence_Fast_ITEMS(seq);
    // A shorter list (preemption, discarded tokens) or a rewritten last token: replay from scratch.
    const long prev = r.consumed > 0 && r.consumed <= len ? PyLong_AsLong(items[r.consumed - 1]) : 0;
    if (prev == -1 && PyErr_Occurred()) PyErr_Clear();  // not an int: the replay below raises for it
    if (len < r.consumed || (r.consumed > 0 && prev != r.last_consumed)) {
      r.reset = true;
      r.pending.clear();
      r.consumed = 0;
    }
    for (size_t j = r.consumed; j < len; ++j) {
      long v = PyLong_AsLong(items[j]);
      if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
      if (v < 0) return false;  // async-scheduling placeholder: its real id is not known yet
      // an id past the vocabulary stays one (never cut to int32, where 2**32 would become token 0)
      r.pending.push_back(static_cast<Tok>(std::min<long>(v, vocab_)));
      r.consumed = j + 1;
      r.last_consumed = v;
    }
    return true;
  }
  // No GIL needed: bring the state up to date with what sync() collected.
  static void settle(Row& r) {
    if (r.reset) {
      r.c->reset(r.st);
      r.reset = false;
    }
    for (Tok t : r.pending) r.c->advance(r.st, t);
    r.pending.clear();
  }

  int vocab_;
  std::vector<Tok> eos_;
  std::vector<std::string> token_bytes_;
  std::unordered_map<std::string, int> cache_;
  std::vector<std::shared_ptr<const Constraint>> handles_;
  std::vector<Row> rows_;
};

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "C++ batched constraint state machines (see tritonpkg_logits.engine for the Python API)";
  py::class_<Engine>(m, "Engine")
      .def(py::init<int, std::vector<Tok>, std::vector<py::bytes>>(), py::arg("vocab_size"), py::arg("eos_ids"),
           py::arg("token_bytes"))
      .def("lookup", &Engine::lookup)
      .def("add_dfa", &Engine::add_dfa)
      .def("add_choice", &Engine::add_choice)
      .def("add_ngram", &Engine::add_ngram)
      .def("add_tokens", &Engine::add_tokens)
      .def("num_constraints", &Engine::num_constraints)
      .def("set_row", &Engine::set_row, py::arg("row"), py::arg("handle"), py::arg("src") = py::none())
      .def("clear_row", &Engine::clear_row)
      .def("move_row", &Engine::move_row)
      .def("swap_rows", &Engine::swap_rows)
      .def("has_row", &Engine::has_row)
      .def("feed", &Engine::feed)
      .def("consumed", &Engine::consumed)
      .def("allowed", &Engine::allowed)
      .def("apply", &Engine::apply, py::arg("ptr"), py::arg("n_rows"), py::arg("width"), py::arg("row_stride"),
           py::arg("slots"), py::arg("threads"))
      .def("fill_bitmask", &Engine::fill_bitmask, py::arg("ptr"), py::arg("n_rows"), py::arg("words"),
           py::arg("slots"), py::arg("threads"))
      .def("restart", &Engine::restart);
#if defined(_OPENMP)
  m.attr("openmp") = true;
#else
  m.attr("openmp") = false;
#endif
  // pybind11 maps std::invalid_argument to ValueError and std::out_of_range to IndexError.
}
