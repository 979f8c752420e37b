#pragma once
// How the two-stage column sums (column_sum.cu) split the rows: a pure
// function of the shape, so results are the same bits on every run and GPU.
// Host and device code; no CUDA headers needed.
#include <cstdint>

namespace pd::cuda::kernels {

struct ColumnChunking {
  int64_t chunks = 1;
  int64_t rows_per_chunk = 1;
};

// Enough chunks for ~512 stage-1 blocks over all column tiles of 32, but at
// least 64 rows per chunk and at most 1024 chunks.
inline ColumnChunking column_chunking(int64_t rows, int64_t cols) {
  ColumnChunking c;
  if (rows <= 0 || cols <= 0) return c;
  const int64_t tiles = (cols + 31) / 32;
  int64_t want = (512 + tiles - 1) / tiles;
  const int64_t most = (rows + 63) / 64;
  if (want > most) want = most;
  if (want > 1024) want = 1024;
  if (want < 1) want = 1;
  c.rows_per_chunk = (rows + want - 1) / want;
  c.chunks = (rows + c.rows_per_chunk - 1) / c.rows_per_chunk;
  return c;
}

// Floats of workspace the column sums need for `outputs` sums of a shape.
inline int64_t column_sum_workspace_floats(int64_t rows, int64_t cols, int outputs) {
  return outputs * column_chunking(rows, cols).chunks * (cols > 0 ? cols : 0);
}

}  // namespace pd::cuda::kernels
