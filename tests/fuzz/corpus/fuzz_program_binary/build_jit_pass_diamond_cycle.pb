ÿÿÿÿÿÿÿÿÿ
x
label
a
sm

loss
c
d"
relu
Xx
Outa"V
softmax_with_cross_entropy
Logitsa
Labellabel
Softmaxsm
Lossloss"
exp
Xa
Outc",
elementwise_add
Xsm
Yc
Outd