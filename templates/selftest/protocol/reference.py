def reference(inputs, sizes):
    return {"c": 2 * inputs["a"]}
