#pragma once
// The simulator's event queue (used by simulator.cpp; a header of its own
// so that tests can check its order against a plain priority queue).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pd {

// Monotone priority queue of (time, rank) events for a discrete-event
// replay, which never schedules an event before the one it is processing.
// Pops the earliest time first and, among equal times, the event pushed
// last - the order of the radix heap it grew out of, which replays must
// keep to stay reproducible. Times are non-negative doubles, compared by
// their bit patterns (which order like the numbers).
//
// Most events of a replay end a compute: now + the stage's forward or
// backward time. Events pushed with one fixed delay come due in the order
// they were pushed, so each distinct delay gets a FIFO (a delay line) and
// such an event costs O(1). Other events (a message arriving later, an
// all-reduce ending) go to a radix heap, which moves each event through
// several of its 64 buckets before it pops.
class EventQueue {
 public:
  struct Event {
    double time;
    int rank;
  };

  explicit EventQueue(size_t delay_lines = 0) : lines_(delay_lines), line_front_(delay_lines, kNone) {}

  bool empty() const { return size_ == 0; }
  size_t delay_lines() const { return lines_.size(); }

  // e.time >= the time of the event popped last.
  void push(Event e) {
    const Entry x = entry(e);
    if (x.key == now_) current_.push_back(x);
    else others_.push(x);
    ++size_;
  }

  // Like push, for an event whose time is no earlier than that of every
  // event pushed to `line` before (same delay, later start).
  void push_delayed(Event e, size_t line) {
    const Entry x = entry(e);
    if (x.key == now_) {
      current_.push_back(x);
    } else {
      DelayLine& l = lines_[line];
      if (l.count == 0) {
        line_front_[line] = x.key;
        if (x.key < earliest_front_) {
          earliest_front_ = x.key;
          earliest_line_ = line;
        }
      }
      l.push_back(x);
    }
    ++size_;
  }

  // Not empty().
  Event pop() {
    if (current_.empty()) gather_next_time();
    const Entry x = current_.back();
    current_.pop_back();
    --size_;
    double t;
    std::memcpy(&t, &x.key, sizeof t);
    return {t, x.rank};
  }

  // The time of the event that pops next unless a push comes first; not
  // empty(). (The shared-cores replay compares it with the next compute end,
  // which is not in the queue.)
  double peek_time() const {
    uint64_t key = now_;
    if (current_.empty()) key = std::min(earliest_front_, others_.min_key());
    double t;
    std::memcpy(&t, &key, sizeof t);
    return t;
  }

  // The rank whose event pops next unless a push comes first (of events
  // due at the same time, any one); -1 when empty.
  int peek_rank() const {
    if (!current_.empty()) return current_.back().rank;
    const uint64_t heap = others_.min_key();
    if (earliest_front_ < heap) return lines_[earliest_line_].front().rank;
    return heap == kNone ? -1 : others_.min_rank();
  }

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};

  struct Entry {
    uint64_t key;  // the time's bit pattern
    uint64_t seq;  // push order
    int rank;
  };

  Entry entry(Event e) {
    Entry x;
    std::memcpy(&x.key, &e.time, sizeof x.key);
    x.seq = seq_++;
    x.rank = e.rank;
    return x;
  }

  class DelayLine {
   public:
    size_t count = 0;
    const Entry& front() const { return slots_[head_]; }
    void push_back(const Entry& x) {
      if (count == slots_.size()) grow();
      slots_[(head_ + count) & (slots_.size() - 1)] = x;
      ++count;
    }
    Entry pop_front() {
      Entry x = slots_[head_];
      head_ = (head_ + 1) & (slots_.size() - 1);
      --count;
      return x;
    }

   private:
    void grow() {
      std::vector<Entry> bigger(std::max<size_t>(16, 2 * slots_.size()));
      for (size_t i = 0; i < count; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
      slots_ = std::move(bigger);
      head_ = 0;
    }
    std::vector<Entry> slots_;  // a ring, power-of-two size
    size_t head_ = 0;
  };

  // Pops (key ascending, last pushed first among equal keys) in amortised
  // O(64) moves per entry: equal keys always share a bucket, in push order.
  class RadixHeap {
   public:
    void push(const Entry& x) { place(x); }
    uint64_t min_key() const {
      if (!buckets_[0].empty()) return last_;
      if (nonempty_ == 0) return kNone;
      return smallest_[lowest()].key;
    }
    int min_rank() const {  // of the entry pop() returns next; not empty
      if (!buckets_[0].empty()) return buckets_[0].back().rank;
      return smallest_[lowest()].rank;
    }
    Entry pop() {  // not empty
      if (buckets_[0].empty()) {
        // The lowest non-empty bucket holds the smallest keys; its smallest
        // becomes the new reference and its entries spread over lower buckets.
        const size_t i = lowest();
        nonempty_ &= ~(uint64_t{1} << (i - 1));
        last_ = smallest_[i].key;
        smallest_[i].key = kNone;
        for (const Entry& x : buckets_[i]) place(x);
        buckets_[i].clear();
      }
      Entry x = buckets_[0].back();
      buckets_[0].pop_back();
      return x;
    }

   private:
    size_t lowest() const { return static_cast<size_t>(std::countr_zero(nonempty_)) + 1; }
    void place(const Entry& x) {
      // 0 for the current reference key, else 1 + the highest differing bit.
      const size_t b = static_cast<size_t>(std::bit_width(x.key ^ last_));
      buckets_[b].push_back(x);
      if (b != 0) {
        nonempty_ |= uint64_t{1} << (b - 1);
        // A bucket's smallest key and, of its entries with that key, the
        // last pushed: the one that pops first once the bucket is spread.
        Smallest& m = smallest_[b];
        if (x.key <= m.key) m = {x.key, x.rank};
      }
    }

    struct Smallest {
      uint64_t key = kNone;
      int rank = -1;
    };
    std::vector<Entry> buckets_[65];
    Smallest smallest_[65];
    uint64_t nonempty_ = 0;  // bit i-1: bucket i (i >= 1) has entries
    uint64_t last_ = 0;
  };

  // Moves every event due at the earliest time into current_, in push
  // order, and makes that time the current one.
  void gather_next_time() {
    const uint64_t heap = others_.min_key();
    const uint64_t next = std::min(heap, earliest_front_);
    now_ = next;
    if (heap == next) {
      while (others_.min_key() == next) current_.push_back(others_.pop());
      std::reverse(current_.begin(), current_.end());  // the heap pops last pushed first
    }
    bool merged = false;
    while (earliest_front_ == next) {
      merged = merged || !current_.empty();
      DelayLine& l = lines_[earliest_line_];
      do current_.push_back(l.pop_front());
      while (l.count > 0 && l.front().key == next);
      line_front_[earliest_line_] = l.count > 0 ? l.front().key : kNone;
      find_earliest_front();
    }
    if (merged) sort_by_push_order();
  }

  // Usually two or three events whose lines ended at the same time: an
  // insertion sort beats std::sort's set-up.
  void sort_by_push_order() {
    auto earlier = [](const Entry& a, const Entry& b) { return a.seq < b.seq; };
    if (current_.size() > 16) {
      std::sort(current_.begin(), current_.end(), earlier);
      return;
    }
    for (size_t i = 1; i < current_.size(); ++i) {
      const Entry x = current_[i];
      size_t j = i;
      for (; j > 0 && earlier(x, current_[j - 1]); --j) current_[j] = current_[j - 1];
      current_[j] = x;
    }
  }

  void find_earliest_front() {
    earliest_front_ = kNone;
    for (size_t i = 0; i < line_front_.size(); ++i)
      if (line_front_[i] < earliest_front_) {
        earliest_front_ = line_front_[i];
        earliest_line_ = i;
      }
  }

  std::vector<Entry> current_;  // the events due at now_, in push order
  uint64_t now_ = 0;            // key of the time being processed
  std::vector<DelayLine> lines_;
  std::vector<uint64_t> line_front_;  // per line: the key of its first event, kNone when empty
  uint64_t earliest_front_ = kNone;   // the smallest of line_front_, that of line earliest_line_
  size_t earliest_line_ = 0;
  RadixHeap others_;
  uint64_t seq_ = 0;
  size_t size_ = 0;
};

}  // namespace pd
