def reference(inputs, sizes):
    return {"out": inputs["table"][inputs["ids"]]}
