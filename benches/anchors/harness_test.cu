// Host-only test of the anchors' checks (harness.cuh): the exact reference and what `check_row`
// accepts and rejects. Needs nvcc but no GPU:
//   nvcc -std=c++20 -I benches/anchors benches/anchors/harness_test.cu -o /tmp/harness_test && /tmp/harness_test
#include "harness.cuh"

static int failures = 0;

#define EXPECT(cond)                                                                \
    do {                                                                            \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);    \
            ++failures;                                                             \
        }                                                                           \
    } while (0)

int main() {
    // Row: ids 0..9; three 5.0 at ids 2, 5, 8; the top 3 by (value desc, id asc) are 9.0 (id 7),
    // then 5.0 at ids 2 and 5 (id 8 loses the tie).
    std::vector<float> row = {1, 0, 5, 2, 3, 5, 4, 9, 5, -1};
    std::vector<int> ref = anchor::reference_ids(row, 3);
    EXPECT((ref == std::vector<int>{2, 5, 7}));

    // Lower ids kept, any order: exact.
    anchor::Check c = anchor::check_row(row, {7, 5, 2}, 3);
    EXPECT(c.ids_valid && c.set_ok && c.lowid_ok);

    // A different tied id: the values are still the top 3, the tie rule is not kept.
    c = anchor::check_row(row, {8, 7, 2}, 3);
    EXPECT(c.ids_valid && c.set_ok && !c.lowid_ok);

    // A value that is not in the top 3 (4.0 at id 6).
    c = anchor::check_row(row, {7, 5, 6}, 3);
    EXPECT(c.ids_valid && !c.set_ok && !c.lowid_ok);

    // Out of range and duplicate ids are invalid, whatever their values.
    c = anchor::check_row(row, {7, 5, 10}, 3);
    EXPECT(!c.ids_valid && !c.set_ok && !c.lowid_ok);
    c = anchor::check_row(row, {7, 7, 2}, 3);
    EXPECT(!c.ids_valid && !c.set_ok);

    // All equal: the lower ids are the first k.
    std::vector<float> flat(100, 0.5f);
    EXPECT((anchor::reference_ids(flat, 4) == std::vector<int>{0, 1, 2, 3}));
    c = anchor::check_row(flat, {3, 2, 1, 0}, 4);
    EXPECT(c.set_ok && c.lowid_ok);
    c = anchor::check_row(flat, {99, 2, 1, 0}, 4);
    EXPECT(c.set_ok && !c.lowid_ok);

    // The median of an even count is the mean of the middle two.
    EXPECT(anchor::median({4.f, 1.f, 3.f, 2.f}) == 2.5);
    EXPECT(anchor::median({5.f, 1.f, 3.f}) == 3.0);

    // The option parser.
    EXPECT((anchor::parse_list("1,16,384") == std::vector<int>{1, 16, 384}));

    if (failures) {
        std::fprintf(stderr, "harness_test: %d failure(s)\n", failures);
        return 1;
    }
    std::printf("harness_test: ok\n");
    return 0;
}
