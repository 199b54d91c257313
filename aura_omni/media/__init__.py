"""Media as pure functions: audio decode/resample/features, image and video decode/resize, output encoding."""
