// The one LibTorch include, precompiled for every target (see CMakeLists.txt).
#pragma once
#include <torch/torch.h>
