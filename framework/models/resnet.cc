// BuildResnet (models.h): a ResNet-18-shaped CNN from basic blocks.
#include <string>
#include <vector>

#include "framework/checkpoint/inference.h"
#include "framework/models/model_layers.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "framework/program_builder.h"

namespace kiln {
namespace {

void CheckResnetConfig(const ResnetConfig& c) {
  if (c.widths.empty()) ThrowInvalidArgument("resnet: widths (--resnet_widths) is empty: give one width per stage");
  for (int64_t w : c.widths) {
    if (w < 1) ThrowInvalidArgument("resnet: widths (--resnet_widths) ", DimsToString(c.widths), ": ", w,
                                    " is not a positive channel count");
  }
  if (c.blocks < 1) ThrowInvalidArgument("resnet: blocks (--resnet_blocks) must be at least 1, got ", c.blocks);
  if (c.channels < 1 || c.height < 1 || c.width < 1 || c.classes < 2) {
    ThrowInvalidArgument("resnet: need channels, height, width >= 1 and classes >= 2; got ", c.channels, "x",
                         c.height, "x", c.width, ", ", c.classes, " classes");
  }
}

// A bias-free k x k convolution (padding k / 2), He-uniform.
std::string Conv(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, int64_t k, int64_t stride,
                 const std::string& name) {
  const std::string f = b.Param(name + ".w", {out, in, k, k}, Init::HeUniform(in * k * k));
  return b.Op1("conv2d", {{"Input", {x}}, {"Filter", {f}}},
               {{"strides", std::vector<int64_t>{stride, stride}}, {"paddings", std::vector<int64_t>{k / 2, k / 2}}},
               "Output");
}

// batch_norm in training; its running statistics are updated in place
// (MeanOut is Mean, VarianceOut is Variance), as the Python layer does.
std::string BatchNorm(ProgramBuilder& b, const std::string& x, int64_t channels, const std::string& name) {
  const std::string scale = b.Param(name + ".scale", {channels}, Init::Constant(1.f));
  const std::string bias = b.Param(name + ".bias", {channels}, Init::Constant(0.f));
  const std::string mean = b.Persistable(name + ".mean", {channels}, 0.f);
  const std::string var = b.Persistable(name + ".variance", {channels}, 1.f);
  const std::string base = b.UniqueName(name);
  const std::string y = base + ".y";
  b.RawOp(OpBuilder("batch_norm")
              .In("X", {x})
              .In("Scale", {scale})
              .In("Bias", {bias})
              .In("Mean", {mean})
              .In("Variance", {var})
              .Out("Y", {y})
              .Out("MeanOut", {mean})
              .Out("VarianceOut", {var})
              .Out("SavedMean", {base + ".saved_mean"})
              .Out("SavedVariance", {base + ".saved_variance"})
              .Attr("is_test", false)
              .Attr("momentum", 0.9f)
              .Attr("epsilon", 1e-5f)
              .Build());
  return y;
}

std::string Relu(ProgramBuilder& b, const std::string& x) { return b.Op1("relu", {{"X", {x}}}); }

// conv3x3-bn-relu-conv3x3-bn, plus x (through a 1x1 conv-bn when the shape
// changes), then relu.
std::string BasicBlock(ProgramBuilder& b, const std::string& x, int64_t in, int64_t out, int64_t stride,
                       const std::string& name) {
  std::string h = Relu(b, BatchNorm(b, Conv(b, x, in, out, 3, stride, name + ".conv0"), out, name + ".bn0"));
  h = BatchNorm(b, Conv(b, h, out, out, 3, 1, name + ".conv1"), out, name + ".bn1");
  std::string shortcut = x;
  if (stride != 1 || in != out) {
    shortcut = BatchNorm(b, Conv(b, x, in, out, 1, stride, name + ".down"), out, name + ".down_bn");
  }
  return Relu(b, b.Op1("elementwise_add", {{"X", {h}}, {"Y", {shortcut}}}));
}

}  // namespace

Model BuildResnet(const ResnetConfig& c, const TrainConfig& tc) {
  CheckResnetConfig(c);
  ProgramBuilder b(tc.seed);
  Model m;
  m.sample_dims = {c.channels, c.height, c.width};
  m.features = b.Data("features", {-1, c.channels, c.height, c.width});
  m.labels = b.Data("labels", {-1, 1}, DataType::kINT64);
  int64_t in = c.widths[0];
  std::string h = Relu(b, BatchNorm(b, Conv(b, m.features, c.channels, in, 3, 1, "stem"), in, "stem_bn"));
  for (size_t s = 0; s < c.widths.size(); ++s) {
    for (int64_t k = 0; k < c.blocks; ++k) {
      const int64_t stride = s > 0 && k == 0 ? 2 : 1;
      h = BasicBlock(b, h, in, c.widths[s], stride, "stage" + std::to_string(s) + ".block" + std::to_string(k));
      in = c.widths[s];
    }
  }
  h = b.Op1("pool2d", {{"X", {h}}},
            {{"pooling_type", std::string("avg")},
             {"global_pooling", true},
             {"ksize", std::vector<int64_t>{1, 1}}});
  h = b.Op1("reshape2", {{"X", {h}}}, {{"shape", std::vector<int64_t>{0, in}}});
  model_layers::ClassifierLoss(b, m, model_layers::Fc(b, h, in, c.classes, model_layers::Act::kNone, "fc"));
  m = model_layers::Finish(b, std::move(m), tc);
  SetIsTest(&m.forward);  // batch_norm on its running statistics
  return m;
}

}  // namespace kiln
