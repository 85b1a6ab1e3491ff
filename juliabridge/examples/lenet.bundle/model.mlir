module @lenet attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x1x28x28xf32>, %arg1: tensor<6x1x5x5xf32>, %arg2: tensor<6xf32>, %arg3: tensor<16x6x5x5xf32>, %arg4: tensor<16xf32>, %arg5: tensor<256x128xf32>, %arg6: tensor<128xf32>, %arg7: tensor<128x10xf32>, %arg8: tensor<10xf32>) -> (tensor<4x10xf32>) {
    %0 = stablehlo.reverse %arg1, dims = [2, 3] : tensor<6x1x5x5xf32>
    %1 = stablehlo.convolution(%arg0, %0) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<4x6x24x24xf32>
    %2 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<6xf32>) -> tensor<1x6x1x1xf32>
    %3 = stablehlo.broadcast_in_dim %2, dims = [0, 1, 2, 3] : (tensor<1x6x1x1xf32>) -> tensor<4x6x24x24xf32>
    %4 = stablehlo.add %1, %3 : tensor<4x6x24x24xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<4x6x24x24xf32>
    %6 = stablehlo.maximum %4, %5 : tensor<4x6x24x24xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<f32>
    %8 = "stablehlo.reduce_window"(%6, %7) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg9: tensor<f32>, %arg10: tensor<f32>):
      %29 = stablehlo.maximum %arg9, %arg10 : tensor<f32>
      stablehlo.return %29 : tensor<f32>
    }) : (tensor<4x6x24x24xf32>, tensor<f32>) -> tensor<4x6x12x12xf32>
    %9 = stablehlo.reverse %arg3, dims = [2, 3] : tensor<16x6x5x5xf32>
    %10 = stablehlo.convolution(%8, %9) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x12x12xf32>, tensor<16x6x5x5xf32>) -> tensor<4x16x8x8xf32>
    %11 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<16xf32>) -> tensor<1x16x1x1xf32>
    %12 = stablehlo.broadcast_in_dim %11, dims = [0, 1, 2, 3] : (tensor<1x16x1x1xf32>) -> tensor<4x16x8x8xf32>
    %13 = stablehlo.add %10, %12 : tensor<4x16x8x8xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<4x16x8x8xf32>
    %15 = stablehlo.maximum %13, %14 : tensor<4x16x8x8xf32>
    %cst_2 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %16 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<f32>
    %17 = "stablehlo.reduce_window"(%15, %16) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg9: tensor<f32>, %arg10: tensor<f32>):
      %29 = stablehlo.maximum %arg9, %arg10 : tensor<f32>
      stablehlo.return %29 : tensor<f32>
    }) : (tensor<4x16x8x8xf32>, tensor<f32>) -> tensor<4x16x4x4xf32>
    %18 = stablehlo.reshape %17 : (tensor<4x16x4x4xf32>) -> tensor<4x256xf32>
    %19 = stablehlo.dot_general %18, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x256xf32>, tensor<256x128xf32>) -> tensor<4x128xf32>
    %20 = stablehlo.broadcast_in_dim %arg6, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %21 = stablehlo.broadcast_in_dim %20, dims = [0, 1] : (tensor<1x128xf32>) -> tensor<4x128xf32>
    %22 = stablehlo.add %19, %21 : tensor<4x128xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %23 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<4x128xf32>
    %24 = stablehlo.maximum %22, %23 : tensor<4x128xf32>
    %25 = stablehlo.dot_general %24, %arg7, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x128xf32>, tensor<128x10xf32>) -> tensor<4x10xf32>
    %26 = stablehlo.broadcast_in_dim %arg8, dims = [1] : (tensor<10xf32>) -> tensor<1x10xf32>
    %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<1x10xf32>) -> tensor<4x10xf32>
    %28 = stablehlo.add %25, %27 : tensor<4x10xf32>
    return %28 : tensor<4x10xf32>
  }
}
