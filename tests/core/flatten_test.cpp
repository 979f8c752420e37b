#include <gtest/gtest.h>

#include "core/error.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

TEST(FlattenLayer, ReshapesWithoutCopyingAndRestoresShapeInBackward) {
  LayerPtr f = make_flatten();
  EXPECT_EQ(f->output_shape({64, 7, 7}), (Shape{3136}));
  EXPECT_THROW(f->output_shape({}), UserError);
  Tensor x = testing::random_tensor({2, 3, 4, 5}, 1);
  LayerContext ctx;
  Tensor y = f->forward({{}, {}, {}}, x, ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 60}));
  EXPECT_TRUE(y.same_storage(x));
  EXPECT_LT(ctx.saved_bytes(), 64u);  // only the shape is kept
  Tensor dx = f->backward({{}, {}, {}}, y, ctx);
  EXPECT_EQ(dx.shape(), x.shape());
  testing::gradcheck(*f, testing::random_tensor({2, 3, 2, 2}, 2));
}

}  // namespace
}  // namespace pd
