// The element type, as a training code base declares it in a header of its own.
#pragma once
typedef float floatX;
