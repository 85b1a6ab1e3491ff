module @jit_vjp attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x1x28x28xf32>, %arg1: tensor<6x1x5x5xf32>, %arg2: tensor<6xf32>, %arg3: tensor<16x6x5x5xf32>, %arg4: tensor<16xf32>, %arg5: tensor<256x128xf32>, %arg6: tensor<128xf32>, %arg7: tensor<128x10xf32>, %arg8: tensor<10xf32>, %arg9: tensor<4x10xf32>) -> (tensor<4x1x28x28xf32> {jax.result_info = "result[0]"}, tensor<6x1x5x5xf32> {jax.result_info = "result[1]"}, tensor<6xf32> {jax.result_info = "result[2]"}, tensor<16x6x5x5xf32> {jax.result_info = "result[3]"}, tensor<16xf32> {jax.result_info = "result[4]"}, tensor<256x128xf32> {jax.result_info = "result[5]"}, tensor<128xf32> {jax.result_info = "result[6]"}, tensor<128x10xf32> {jax.result_info = "result[7]"}, tensor<10xf32> {jax.result_info = "result[8]"}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<4x128xf32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<4x16x8x8xf32>
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<4x6x24x24xf32>
    %0 = stablehlo.reverse %arg1, dims = [2, 3] : tensor<6x1x5x5xf32>
    %1 = stablehlo.convolution(%arg0, %0) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<4x6x24x24xf32>
    %2 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<6xf32>) -> tensor<4x6x24x24xf32>
    %3 = stablehlo.add %1, %2 : tensor<4x6x24x24xf32>
    %4 = stablehlo.maximum %3, %cst_2 : tensor<4x6x24x24xf32>
    %5 = "stablehlo.reduce_window"(%4, %cst_1) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.maximum %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x6x24x24xf32>, tensor<f32>) -> tensor<4x6x12x12xf32>
    %6 = stablehlo.reverse %arg3, dims = [2, 3] : tensor<16x6x5x5xf32>
    %7 = stablehlo.convolution(%5, %6) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x12x12xf32>, tensor<16x6x5x5xf32>) -> tensor<4x16x8x8xf32>
    %8 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<16xf32>) -> tensor<4x16x8x8xf32>
    %9 = stablehlo.add %7, %8 : tensor<4x16x8x8xf32>
    %10 = stablehlo.maximum %9, %cst_0 : tensor<4x16x8x8xf32>
    %11 = "stablehlo.reduce_window"(%10, %cst_1) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.maximum %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x16x8x8xf32>, tensor<f32>) -> tensor<4x16x4x4xf32>
    %12 = stablehlo.reshape %11 : (tensor<4x16x4x4xf32>) -> tensor<4x256xf32>
    %13 = stablehlo.dot_general %12, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x256xf32>, tensor<256x128xf32>) -> tensor<4x128xf32>
    %14 = stablehlo.broadcast_in_dim %arg6, dims = [1] : (tensor<128xf32>) -> tensor<4x128xf32>
    %15 = stablehlo.add %13, %14 : tensor<4x128xf32>
    %16 = stablehlo.maximum %15, %cst : tensor<4x128xf32>
    %17 = stablehlo.dot_general %16, %arg7, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x128xf32>, tensor<128x10xf32>) -> tensor<4x10xf32>
    %18 = stablehlo.broadcast_in_dim %arg8, dims = [1] : (tensor<10xf32>) -> tensor<4x10xf32>
    %19 = stablehlo.add %17, %18 : tensor<4x10xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_4 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<4x128xf32>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<4x16x8x8xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<4x6x24x24xf32>
    %20 = stablehlo.reverse %arg1, dims = [2, 3] : tensor<6x1x5x5xf32>
    %21 = stablehlo.convolution(%arg0, %20) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x1x28x28xf32>, tensor<6x1x5x5xf32>) -> tensor<4x6x24x24xf32>
    %22 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<6xf32>) -> tensor<4x6x24x24xf32>
    %23 = stablehlo.add %21, %22 : tensor<4x6x24x24xf32>
    %24 = stablehlo.maximum %23, %cst_7 : tensor<4x6x24x24xf32>
    %25 = "stablehlo.reduce_window"(%24, %cst_4) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.maximum %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x6x24x24xf32>, tensor<f32>) -> tensor<4x6x12x12xf32>
    %26 = stablehlo.reverse %arg3, dims = [2, 3] : tensor<16x6x5x5xf32>
    %27 = stablehlo.convolution(%25, %26) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x12x12xf32>, tensor<16x6x5x5xf32>) -> tensor<4x16x8x8xf32>
    %28 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<16xf32>) -> tensor<4x16x8x8xf32>
    %29 = stablehlo.add %27, %28 : tensor<4x16x8x8xf32>
    %30 = stablehlo.maximum %29, %cst_6 : tensor<4x16x8x8xf32>
    %31 = "stablehlo.reduce_window"(%30, %cst_4) <{base_dilations = array<i64: 1, 1, 1, 1>, padding = dense<0> : tensor<4x2xi64>, window_dilations = array<i64: 1, 1, 1, 1>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.maximum %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x16x8x8xf32>, tensor<f32>) -> tensor<4x16x4x4xf32>
    %32 = stablehlo.reshape %31 : (tensor<4x16x4x4xf32>) -> tensor<4x256xf32>
    %33 = stablehlo.dot_general %32, %arg5, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x256xf32>, tensor<256x128xf32>) -> tensor<4x128xf32>
    %34 = stablehlo.broadcast_in_dim %arg6, dims = [1] : (tensor<128xf32>) -> tensor<4x128xf32>
    %35 = stablehlo.add %33, %34 : tensor<4x128xf32>
    %36 = stablehlo.maximum %35, %cst_5 : tensor<4x128xf32>
    %37 = stablehlo.reduce(%arg9 init: %cst_3) applies stablehlo.add across dimensions = [0] : (tensor<4x10xf32>, tensor<f32>) -> tensor<10xf32>
    %38 = stablehlo.dot_general %arg9, %arg7, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<4x10xf32>, tensor<128x10xf32>) -> tensor<4x128xf32>
    %39 = stablehlo.dot_general %36, %arg9, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x128xf32>, tensor<4x10xf32>) -> tensor<128x10xf32>
    %40 = stablehlo.compare LT, %35, %cst_5 : (tensor<4x128xf32>, tensor<4x128xf32>) -> tensor<4x128xi1>
    %41 = stablehlo.select %40, %cst_5, %38 : tensor<4x128xi1>, tensor<4x128xf32>
    %42 = stablehlo.reduce(%41 init: %cst_3) applies stablehlo.add across dimensions = [0] : (tensor<4x128xf32>, tensor<f32>) -> tensor<128xf32>
    %43 = stablehlo.dot_general %41, %arg5, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<4x128xf32>, tensor<256x128xf32>) -> tensor<4x256xf32>
    %44 = stablehlo.dot_general %32, %41, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<4x256xf32>, tensor<4x128xf32>) -> tensor<256x128xf32>
    %45 = stablehlo.reshape %43 : (tensor<4x256xf32>) -> tensor<4x16x4x4xf32>
    %46 = "stablehlo.select_and_scatter"(%30, %45, %cst_3) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.compare GE, %arg10, %arg11 : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %62 : tensor<i1>
    }, {
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.add %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x16x8x8xf32>, tensor<4x16x4x4xf32>, tensor<f32>) -> tensor<4x16x8x8xf32>
    %47 = stablehlo.compare LT, %29, %cst_6 : (tensor<4x16x8x8xf32>, tensor<4x16x8x8xf32>) -> tensor<4x16x8x8xi1>
    %48 = stablehlo.select %47, %cst_6, %46 : tensor<4x16x8x8xi1>, tensor<4x16x8x8xf32>
    %49 = stablehlo.reduce(%48 init: %cst_3) applies stablehlo.add across dimensions = [0, 2, 3] : (tensor<4x16x8x8xf32>, tensor<f32>) -> tensor<16xf32>
    %50 = stablehlo.reverse %26, dims = [2, 3] : tensor<16x6x5x5xf32>
    %51 = stablehlo.convolution(%48, %50) dim_numbers = [b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[4, 4], [4, 4]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x16x8x8xf32>, tensor<16x6x5x5xf32>) -> tensor<4x6x12x12xf32>
    %52 = stablehlo.convolution(%25, %48) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[f, b, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x12x12xf32>, tensor<4x16x8x8xf32>) -> tensor<16x6x5x5xf32>
    %53 = stablehlo.reverse %52, dims = [2, 3] : tensor<16x6x5x5xf32>
    %54 = "stablehlo.select_and_scatter"(%24, %51, %cst_3) <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>}> ({
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.compare GE, %arg10, %arg11 : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %62 : tensor<i1>
    }, {
    ^bb0(%arg10: tensor<f32>, %arg11: tensor<f32>):
      %62 = stablehlo.add %arg10, %arg11 : tensor<f32>
      stablehlo.return %62 : tensor<f32>
    }) : (tensor<4x6x24x24xf32>, tensor<4x6x12x12xf32>, tensor<f32>) -> tensor<4x6x24x24xf32>
    %55 = stablehlo.compare LT, %23, %cst_7 : (tensor<4x6x24x24xf32>, tensor<4x6x24x24xf32>) -> tensor<4x6x24x24xi1>
    %56 = stablehlo.select %55, %cst_7, %54 : tensor<4x6x24x24xi1>, tensor<4x6x24x24xf32>
    %57 = stablehlo.reduce(%56 init: %cst_3) applies stablehlo.add across dimensions = [0, 2, 3] : (tensor<4x6x24x24xf32>, tensor<f32>) -> tensor<6xf32>
    %58 = stablehlo.reverse %20, dims = [2, 3] : tensor<6x1x5x5xf32>
    %59 = stablehlo.convolution(%56, %58) dim_numbers = [b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[4, 4], [4, 4]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x6x24x24xf32>, tensor<6x1x5x5xf32>) -> tensor<4x1x28x28xf32>
    %60 = stablehlo.convolution(%arg0, %56) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[f, b, 0, 1], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64, precision_config = [#stablehlo<precision DEFAULT>, #stablehlo<precision DEFAULT>]} : (tensor<4x1x28x28xf32>, tensor<4x6x24x24xf32>) -> tensor<6x1x5x5xf32>
    %61 = stablehlo.reverse %60, dims = [2, 3] : tensor<6x1x5x5xf32>
    return %59, %61, %57, %53, %49, %44, %42, %39, %37 : tensor<4x1x28x28xf32>, tensor<6x1x5x5xf32>, tensor<6xf32>, tensor<16x6x5x5xf32>, tensor<16xf32>, tensor<256x128xf32>, tensor<128xf32>, tensor<128x10xf32>, tensor<10xf32>
  }
}
