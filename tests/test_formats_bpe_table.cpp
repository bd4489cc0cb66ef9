// formats/bpe_table.hpp: the merge table built from rules, searched, and
// checked as a file's copy of it would be (every fault named).
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "formats/bpe_table.hpp"
#include "formats/error.hpp"

using mmgpt::BpeMerge;
using mmgpt::BpeTables;
using mmgpt::Error;

namespace {

// Every single byte as GPT-2 spells it would need 256 tokens; a few suffice:
// "a" "b" "c" "ab" "abc", and the merges a+b -> ab, ab+c -> abc.
std::vector<std::string> tokens() { return {"a", "b", "c", "ab", "abc"}; }
std::vector<std::pair<std::string, std::string>> rules() { return {{"a", "b"}, {"ab", "c"}}; }

void check(const BpeTables& t) { mmgpt::check_bpe_tables(t.view(), 5, 2, "model.mmgpt: tokenizer tables"); }

}  // namespace

TEST_CASE("built tables find each rule by its pair, with its rank and result") {
  const BpeTables t = BpeTables::build(tokens(), rules());
  CHECK(t.keys.size() == 16);
  CHECK(t.byte_id[int('a')] == 0);
  CHECK(t.byte_id[int('c')] == 2);
  CHECK(t.byte_id[0] == -1);  // byte 0 is spelled U+0100 in GPT-2's vocabulary: not here
  const BpeMerge ab = t.view().find(0, 1), abc = t.view().find(3, 2), none = t.view().find(1, 0);
  CHECK((ab.rank == 0 && ab.id == 3));
  CHECK((abc.rank == 1 && abc.id == 4));
  CHECK((none.rank == mmgpt::kBpeNoMerge && none.id == -1));
  CHECK_NOTHROW(check(t));
}

TEST_CASE("a repeated rule keeps its first rank; a rule on unknown tokens is named") {
  auto r = rules();
  r.push_back({"a", "b"});
  const BpeTables t = BpeTables::build(tokens(), r);
  CHECK(t.view().find(0, 1).rank == 0);
  CHECK_THROWS_WITH_AS(BpeTables::build(tokens(), {{"a", "x"}}),
                       "tokenizer merge rule 1 'a x': its right part is not in the vocabulary", Error);
  CHECK_THROWS_WITH_AS(BpeTables::build(tokens(), {{"b", "c"}}),
                       "tokenizer merge rule 1 'b c': the merged token is not in the vocabulary", Error);
}

TEST_CASE("check_bpe_tables refuses each fault a stored table could have") {
  const BpeTables good = BpeTables::build(tokens(), rules());
  size_t used = 0;
  while (good.keys[used] == mmgpt::kBpeEmptyKey) ++used;  // a slot holding a merge
  auto refused = [](const BpeTables& t, const std::string& what) {
    CHECK_THROWS_WITH_AS(check(t), doctest::Contains(what.c_str()), Error);
  };
  BpeTables t = good;
  t.byte_id[7] = 5;
  refused(t, "the token of byte 7 is 5 (must be -1 or below 5)");
  t = good;
  t.byte_id[7] = -2;
  refused(t, "the token of byte 7 is -2");
  t = good;
  t.keys.resize(24), t.merges.resize(24);
  refused(t, "the merge table has 24 slots (must be a power of two from 16 to 2^26)");
  t = good;
  t.keys.resize(8), t.merges.resize(8);
  refused(t, "the merge table has 8 slots");
  t = good;
  t.merges[used].id = 5;
  refused(t, "merge table slot " + std::to_string(used) + " holds the ids");
  t = good;
  t.keys[used] = mmgpt::bpe_pair_key(0, 9);
  refused(t, "merge table slot " + std::to_string(used) + " holds the ids 0, 9");
  t = good;
  t.merges[used].rank = 2;
  refused(t, "holds the rank 2 (must be below 2)");
  t = good;
  t.merges[used].rank = -1;
  refused(t, "holds the rank -1");
  t = good;
  size_t empty = 0;
  while (good.keys[empty] != mmgpt::kBpeEmptyKey) ++empty;
  t.merges[empty] = BpeMerge{0, 3};
  refused(t, "merge table slot " + std::to_string(empty) + " is empty but holds a merge");

  // A full table would make find() of an absent pair loop forever.
  t = good;
  for (size_t h = 0; h < t.keys.size(); ++h)
    if (t.keys[h] == mmgpt::kBpeEmptyKey) t.keys[h] = mmgpt::bpe_pair_key(4, 4), t.merges[h] = BpeMerge{0, 0};
  refused(t, "");  // refused, whatever it names first (the copies of (4, 4) or the lack of an empty slot)

  // A key moved away from its probe's start, past an empty slot, or stored twice.
  t = good;
  const uint64_t k = good.keys[used];
  const size_t mask = good.keys.size() - 1, start = mmgpt::bpe_first_slot(k, mask);
  const size_t moved = (start + 5) & mask;  // slots start+1 .. start+4 include an empty one here
  REQUIRE(good.keys[moved] == mmgpt::kBpeEmptyKey);
  std::swap(t.keys[used], t.keys[moved]);
  std::swap(t.merges[used], t.merges[moved]);
  refused(t, "merge table slot " + std::to_string(moved) + " is not where its pair is looked up");
  t = good;
  t.keys[moved] = k, t.merges[moved] = good.merges[used];
  refused(t, "is not where its pair is looked up");
}
