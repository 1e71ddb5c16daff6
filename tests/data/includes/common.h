// Beside the kernel's source: found without any option (the source's own folder is searched first).
#ifndef COMMON_H
#define COMMON_H
typedef float floatX;
#include "scale.h"
#endif
