"""The small Keras model the FedAvg tests train with our aggregators, and a
client's data for it."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff


def dense_model_fn():
  """4 float features -> Dense(2) logits, sparse cross-entropy; labels are
  [None, 1] int32 (10 weights: 4 x 2 + 2)."""
  keras_model = tf.keras.Sequential(
      [tf.keras.layers.InputLayer(input_shape=(4,)),
       tf.keras.layers.Dense(2)])
  return tff.learning.models.from_keras_model(
      keras_model,
      input_spec=(tf.TensorSpec([None, 4],
                                tf.float32), tf.TensorSpec([None, 1],
                                                           tf.int32)),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def ones_dataset():
  """A client of `dense_model_fn`: 4 examples of ones, label 0, batches of 2."""
  return tf.data.Dataset.from_tensor_slices(
      (np.ones([4, 4], np.float32), np.zeros([4, 1], np.int32))).batch(2)
