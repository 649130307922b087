// Registration entry points of the built-in ops (reference kernels), one per
// source file in this folder. Called from RegisterAllOps only.
#pragma once

namespace kiln {

class OpRegistry;

void RegisterElementwiseOps(OpRegistry& r);  // elementwise_add/sub/mul/div (+grads)
void RegisterActivationOps(OpRegistry& r);   // relu, tanh, sigmoid, exp, gelu, scale (+grads)
void RegisterMatmulOps(OpRegistry& r);       // matmul (+grad)
void RegisterConvPoolOps(OpRegistry& r);     // conv2d, pool2d (+grads)
void RegisterNormSoftmaxOps(OpRegistry& r);  // softmax, softmax_with_cross_entropy (+grads)
void RegisterLayerNormOps(OpRegistry& r);    // layer_norm (+grad)
void RegisterReduceOps(OpRegistry& r);       // mean, reduce_sum, reduce_mean, sum (+grads)
void RegisterShapeOps(OpRegistry& r);        // reshape2, transpose2 (+grads)
void RegisterFillOps(OpRegistry& r);         // fill_constant, uniform_random
void RegisterAssignValueOps(OpRegistry& r);  // assign_value
void RegisterOptimizerOps(OpRegistry& r);    // sgd, momentum, adam
void RegisterLrScheduleOps(OpRegistry& r);   // lr_schedule
void RegisterGradClipOps(OpRegistry& r);     // clip_by_global_norm
void RegisterGradMergeOps(OpRegistry& r);    // grad_merge_step, grad_merge
void RegisterConcatSplitSliceOps(OpRegistry& r);  // concat, split, slice (+grads)
void RegisterSliceOps(OpRegistry& r);             // slice (+grad); called by RegisterConcatSplitSliceOps
void RegisterClipLogSoftmaxOps(OpRegistry& r);    // clip, log_softmax, fused_softmax_mask_upper_triangle (+grads)
void RegisterBatchNormOps(OpRegistry& r);    // batch_norm (+grad)
void RegisterLookupTableOps(OpRegistry& r);  // lookup_table (+grad)
void RegisterDropoutOps(OpRegistry& r);      // dropout (+grad)
void RegisterFusedAttentionOps(OpRegistry& r);  // fused_attention (+grad)
void RegisterReduceMaxMinOps(OpRegistry& r);    // reduce_max, reduce_min (+grads)
void RegisterArgCastOps(OpRegistry& r);         // arg_max, arg_min, cast
void RegisterGatherOneHotOps(OpRegistry& r);    // gather (+grad), one_hot
void RegisterCompareWhereOps(OpRegistry& r);    // less_than ... not_equal, where (+grad)
void RegisterMathOps(OpRegistry& r);         // log, sqrt, rsqrt, abs, pow, leaky_relu, softplus (+grads)
void RegisterSigmoidCrossEntropyOps(OpRegistry& r);  // sigmoid_cross_entropy_with_logits (+grad)
// The ops ONNX models need (issue 28):
void RegisterUnaryMathOps(OpRegistry& r);       // erf, floor, ceil, round, sign, reciprocal, softsign (+grads)
void RegisterTrigOps(OpRegistry& r);            // sin ... atanh (+grads)
void RegisterOnnxActivationOps(OpRegistry& r);  // elu, selu, celu, hard_sigmoid, hard_swish, thresholded_relu (+grads)
void RegisterLogicalOps(OpRegistry& r);         // logical_and/or/xor/not, isnan, isinf
void RegisterBinaryOps(OpRegistry& r);          // elementwise_max, elementwise_min (+grads), elementwise_mod
void RegisterElementwisePowOps(OpRegistry& r);  // elementwise_pow (+grad)
void RegisterTileExpandOps(OpRegistry& r);      // tile, expand_v2 (+grads)
void RegisterPadOps(OpRegistry& r);             // pad (+grad)
void RegisterCumsumOps(OpRegistry& r);          // cumsum (+grad)
void RegisterReduceNormOps(OpRegistry& r);      // reduce_prod, reduce_l1, reduce_l2, logsumexp (+grads)
void RegisterInstanceNormOps(OpRegistry& r);    // instance_norm (+grad)
void RegisterPreluOps(OpRegistry& r);           // prelu (+grad)
void RegisterNllLossOps(OpRegistry& r);         // nll_loss (+grad)
void RegisterTakeAlongAxisOps(OpRegistry& r);   // take_along_axis (+grad)

void RegisterCollectiveOps(OpRegistry& r);   // c_allreduce_avg, c_allreduce_start, c_allreduce_wait (distributed/)

}  // namespace kiln
